"""Whether a request comes from this host: the one rule behind every default that trusts a caller on loopback
(the orchestrator's `/metrics` and `/healthz` details without `--metrics-token`, the gateway's `/admin` without
admin tokens).

A loopback socket is not enough. A reverse proxy on the same host connects from loopback for every client it
fronts, so a request carrying a relay's header (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`) is not local,
whatever its socket's address. (uvicorn replaces the socket's address with `X-Forwarded-For`'s only for the
proxies it trusts, loopback by default, and a proxy may send the other two alone: the header's presence is
what counts, not the address it names.)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import Scope

RELAYED = (b"forwarded", b"x-forwarded-for", b"x-real-ip")
"""The headers a reverse proxy adds (ASGI header names are lower case)."""


def loopback(host: str) -> bool:
    """`host` (an address, `[::1]`, or `localhost`) is this host's loopback."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def relayed(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(key in RELAYED for key, _ in headers)


def local_caller(scope: Scope) -> bool:
    """The ASGI request came over loopback and no proxy relayed it."""
    client = scope.get("client")
    return client is not None and loopback(client[0]) and not relayed(scope.get("headers") or ())
