"""Putting a `Gateway` to work: the jobs that keep its picture of the fleet current run from here.

The gateway's state (`service`) knows nothing of these jobs; `health` and `discovery` work on that
state, and this module, above them all, wires them in, so no two of them import each other.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator

import anyio

from gateway.config import GatewayConfig
from gateway.discovery import discover_forever, getaddrinfo, probe_now
from gateway.health import probe_forever, reap_forever
from gateway.service import Gateway, Resolver
from gateway.store import Store
from toolkit.wire import fleet_secret


def build_gateway(cfg: GatewayConfig, *, store: Store | None = None, resolver: Resolver = getaddrinfo) -> Gateway:
    """A gateway whose calls that find no available replica probe the ones down once, at once."""
    gw = Gateway(cfg, store=store, resolver=resolver)
    fleet_secret()  # the tool servers' admin token's key (`sessionlist`): read now, not on the event loop
    gw.router.revive = functools.partial(probe_now, gw)
    return gw


@contextlib.asynccontextmanager
async def running(gw: Gateway) -> AsyncIterator[None]:
    """Probes, the idle-session reaper, DNS discovery and the entrypoint's extra jobs, for as long as
    the block runs (one that ends is recorded in `gw.loops`: /healthz fails); then the HTTP client and the
    store are closed."""
    await gw.load_discovery()
    async with anyio.create_task_group() as tg:
        gw.tasks = tg
        for name, loop in (("health", probe_forever), ("reaper", reap_forever), ("discovery", discover_forever)):
            gw.loops.start(tg, name, loop, gw)
        for name, job in gw.background.items():
            gw.loops.start(tg, name, job)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
            gw.tasks = None
    gw.client.close()
    await gw.store.aclose()
