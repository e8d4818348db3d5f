"""Replica discovery by DNS: every address a namespace's name resolves to is one of its replicas.

Resolved again every `discover.interval_s` (and when a call finds no replica). An address that appears
becomes a replica once a probe answers. One that vanishes while it is up is being stopped (a swarm takes a
task out of DNS as it stops it): it gets no new session but keeps serving the sessions pinned to it while it
drains (`toolkit.drain`), and is dropped once it is down: when it said it drains, their next call is then
placed again and told the state was reset; else (killed, a lost node) they are lost. One that vanishes while
down is dropped at once: its sessions are lost (their next call gets the error naming them, as for a dead
replica).
Replica URLs are built from the address, so gateway replicas sharing a Redis pin table agree on them.
"""

from __future__ import annotations

import asyncio
import socket

import anyio
import structlog

from gateway.health import probe
from gateway.routing import Namespace
from gateway.service import Gateway
from gateway.upstream import Replica

log = structlog.get_logger(__name__)

NO_SUCH_NAME = frozenset({socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)})


async def getaddrinfo(name: str, port: int) -> list[str]:
    """A and AAAA answers through the event loop's resolver (it runs in a worker thread)."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


async def _addresses(gw: Gateway, ns: Namespace) -> list[str] | None:
    """The name's addresses; [] when it does not exist (every replica gone, or none started yet); None
    when the lookup failed, so a resolver hiccup never drops healthy replicas."""
    d = ns.cfg.discover
    assert d is not None
    try:
        with anyio.fail_after(gw.cfg.health.timeout_s):
            return await gw.resolver(d.dns, d.port)
    except socket.gaierror as exc:
        if exc.errno in NO_SUCH_NAME:
            return []
        log.warning("discovery.failed", namespace=ns.name, name=d.dns, error=str(exc))
    except (OSError, TimeoutError) as exc:
        log.warning("discovery.failed", namespace=ns.name, name=d.dns, error=str(exc) or type(exc).__name__)
    return None


async def refresh(gw: Gateway, ns: Namespace) -> list[Replica]:
    """Resolve the namespace's name and adopt the answer; new replicas are probed before this returns.
    Returns the replicas added."""
    d = ns.cfg.discover
    if d is None:
        return []
    ns.resolved_at = anyio.current_time()
    addresses = await _addresses(gw, ns)
    if addresses is None or ns is not gw.namespaces.get(ns.name):  # failed, or replaced by a reload meanwhile
        return []
    added, removed = ns.adopt({d.url(a) for a in addresses})
    if not (added or removed):
        return []
    log.info(
        "discovery.changed",
        namespace=ns.name,
        name=d.dns,
        added=[r.url for r in added],
        removed=[r.url for r in removed],
    )
    for replica in removed:
        await gw.forget(replica)
    for replica in added:
        gw.watch(replica)
    async with anyio.create_task_group() as tg:
        for replica in added:
            tg.start_soon(probe, gw, ns, replica)
    return added


async def probe_now(gw: Gateway, ns: Namespace) -> None:
    """A call found no available replica in `ns`: probe the unavailable ones once, now, instead of letting
    it fail until the next scheduled probe (a swarm starts services in no order). Callers arriving while
    a round runs wait for that round rather than start another."""
    running = gw.reviving.get(ns.name)
    if running is not None:
        await running.wait()
        return
    done = gw.reviving[ns.name] = anyio.Event()
    try:
        fresh = {r.url for r in await refresh(gw, ns)}  # a discovered namespace resolves its name again first
        async with anyio.create_task_group() as tg:
            for replica in list(ns.replicas.values()):
                if not replica.available and replica.url not in fresh:
                    tg.start_soon(probe, gw, ns, replica)
    finally:
        del gw.reviving[ns.name]
        done.set()


async def discover_forever(gw: Gateway, tick_s: float = 0.25) -> None:
    """Resolve each discovered namespace when its interval is due (a namespace new from a reload at once)."""
    while True:
        now = anyio.current_time()
        due = [
            ns
            for ns in list(gw.namespaces.values())
            if ns.cfg.discover is not None and now - ns.resolved_at >= ns.cfg.discover.interval_s
        ]
        if due:
            async with anyio.create_task_group() as tg:
                for ns in due:
                    tg.start_soon(_refresh_logged, gw, ns)
        await anyio.sleep(tick_s)


async def _refresh_logged(gw: Gateway, ns: Namespace) -> None:
    """The loop must outlive one namespace's failure (a store hiccup while dropping a replica)."""
    try:
        await refresh(gw, ns)
    except Exception:
        log.exception("discovery.refresh_failed", namespace=ns.name)
