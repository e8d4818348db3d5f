"""Background work: active health probes (which also refresh discovery and tool pins) and idle cleanup."""

from __future__ import annotations

import time

import anyio
import structlog

from gateway.envelope import HANDLE_ARGUMENT
from gateway.errors import Draining, GatewayError, Unreached
from gateway.keys import SessionKey
from gateway.probe import ProbeSession
from gateway.routing import Namespace
from gateway.service import Gateway
from gateway.store import Pin
from gateway.upstream import Replica
from toolkit.mcpwire.http import ProtocolError
from toolkit.wire import SESSION_HEADER

log = structlog.get_logger(__name__)


async def probe(gw: Gateway, ns: Namespace, replica: Replica) -> None:
    """initialize + tools/list on one replica; success brings it back, failure counts toward its circuit once
    (an unreachable replica opens it at once). A probe that failed while the replica answered calls counts
    nothing: on a starved machine a probe's timeout says the CPU was busy, not that the replica died, and
    declaring it down would lose every session it holds while their calls succeed."""
    timeout = gw.cfg.health.timeout_s
    session = ProbeSession(gw.client, replica, dict(ns.cfg.headers.static), timeout, passive=False)
    began = time.monotonic()
    try:
        with anyio.fail_after(timeout * 2):
            init = await session.open()
            tools = await session.list_tools()
    except Draining:
        return  # alive, serving the sessions it holds until it stops: neither up for new ones nor down
    except (GatewayError, TimeoutError, ProtocolError, OSError) as exc:
        error = str(exc) or type(exc).__name__
        if replica.answered_since(began):
            log.info("replica.probe_slow", namespace=ns.name, replica=replica.url, error=error)
            return
        replica.record_failure(decisive=isinstance(exc, Unreached))
        log.info("replica.probe_failed", namespace=ns.name, replica=replica.url, error=error)
        return
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(timeout):
            try:
                await session.close()
            except GatewayError:
                pass
    replica.record_success()
    if isinstance(init.get("serverInfo"), dict):
        init["serverInfo"]["name"] = ns.name
    reviewed = await ns.guard.review(tools)
    ns.initialize_result, ns.tools = init, reviewed
    await gw.save_discovery(ns)


async def probe_all(gw: Gateway, *, only_down: bool = False) -> None:
    async with anyio.create_task_group() as tg:
        for ns in list(gw.namespaces.values()):
            for replica in list(ns.replicas.values()):
                if not only_down or not replica.healthy:
                    tg.start_soon(_probe_guarded, gw, ns, replica)


async def _probe_guarded(gw: Gateway, ns: Namespace, replica: Replica) -> None:
    """One probe; a failure that is not the replica's (the store timing out) is logged, so it neither
    cancels the other probes of the round nor ends `probe_forever`."""
    try:
        await probe(gw, ns, replica)
    except Exception:
        log.exception("replica.probe_crashed", namespace=ns.name, replica=replica.url)


async def probe_forever(gw: Gateway) -> None:
    """Every replica each `interval_s`; a replica that is down (an open circuit) every `open_s` too."""
    last_full = -float("inf")
    while True:
        now = anyio.current_time()
        full = now - last_full >= gw.cfg.health.interval_s
        await probe_all(gw, only_down=not full)
        if full:
            last_full = now
            gw.started = True
        await anyio.sleep(min(gw.cfg.health.interval_s, gw.cfg.health.open_s))


async def cleanup(gw: Gateway, ns: Namespace, key: SessionKey, pin: Pin) -> None:
    """Call `cleanup_session` (when the namespace has it) for a session on its replica, end the upstream
    MCP session the gateway opened for it, then drop its pin."""
    replica = ns.replicas.get(pin.replica)
    known = key.kind != "retry" and any(
        isinstance(t, dict) and t.get("name") == "cleanup_session" for t in ns.tools or []
    )
    rec = await gw.store.get_session(key.id) if key.by_session else None
    upstream_sid = rec.upstream_sid if rec is not None else None
    own_session = upstream_sid is not None
    if replica is not None and replica.available and not pin.lost and (known or own_session):
        headers = dict(ns.cfg.headers.static)
        if key.by_header:
            headers[SESSION_HEADER] = key.id
        session = ProbeSession(gw.client, replica, headers, gw.cfg.health.timeout_s)
        try:
            with anyio.fail_after(gw.cfg.health.timeout_s * 3):
                if own_session:
                    session.sid = upstream_sid
                else:
                    await session.open()
                if known:
                    arguments = {HANDLE_ARGUMENT: key.id} if key.kind == "handle" else {}
                    await session.request("tools/call", {"name": "cleanup_session", "arguments": arguments})
                await session.close()  # ends the upstream MCP session too
        except (GatewayError, TimeoutError) as exc:
            log.info("session.cleanup_failed", namespace=ns.name, session_id=key.id, error=str(exc))
    if rec is not None:
        await gw.store.drop_session(key.id)
    await gw.store.drop_pin(ns.name, key)
    log.info("session.reaped", namespace=ns.name, session_id=key.id, replica=pin.replica, lost=pin.lost)


async def reap_once(gw: Gateway) -> int:
    n = 0
    for ns in list(gw.namespaces.values()):
        for key, pin in await gw.store.idle_pins(ns.name, gw.cfg.sessions.idle_s):
            await cleanup(gw, ns, key, pin)
            n += 1
    return n


async def reap_forever(gw: Gateway) -> None:
    while True:
        await anyio.sleep(gw.cfg.sessions.reap_interval_s)
        try:
            await reap_once(gw)
        except Exception:  # the reaper must outlive a store hiccup
            log.exception("reaper.failed")
