"""Who may talk to the gateway: Host / Origin checks against DNS rebinding, bearer tokens, rate limits.

One ASGI middleware, the Starlette shape; every refusal is a JSON-RPC error with a precise message.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.asgi import send_error
from gateway.config import SecurityConfig
from gateway.errors import Forbidden, RateLimited, Unauthorized
from gateway.paths import segments
from gateway.service import Gateway
from toolkit.loopback import local_caller
from toolkit.tracing import request_context
from toolkit.wire import REQUEST_ID_HEADER, admin_token

OPEN_PATHS = frozenset({"/healthz", "/readyz"})


def host_allowed(patterns: tuple[str, ...], host: str | None) -> bool:
    if not patterns:
        return True
    if host is None:
        return False
    host = host.lower()
    for pattern in patterns:
        pattern = pattern.lower()
        if pattern.endswith(":*"):
            base = pattern[:-2]
            if host == base or (host.startswith(base + ":") and host[len(base) + 1 :].isdigit()):
                return True
        elif host == pattern:
            return True
    return False


def origin_allowed(sec: SecurityConfig, origin: str | None) -> bool:
    if origin is None or origin in sec.allowed_origins:
        return True
    netloc = urlsplit(origin).netloc
    if not netloc:
        return False
    return bool(sec.accepted_host_headers) and host_allowed(sec.accepted_host_headers, netloc)


_REQUEST_ID = REQUEST_ID_HEADER.encode()
_CHECKED = frozenset({b"host", b"origin", b"authorization", b"traceparent", _REQUEST_ID})
"""The headers the middleware reads, found in one pass over the request's headers."""


def _checked_headers(scope: Scope) -> dict[bytes, str]:
    """The first value of each `_CHECKED` header the request carries (as `asgi.header` finds them)."""
    found: dict[bytes, str] = {}
    for key, value in scope["headers"]:
        if key in _CHECKED and key not in found:
            found[key] = value.decode("latin-1")
    return found


def _bearer(value: str | None) -> str | None:
    if value is None or not value[:7].lower() == "bearer ":
        return None
    return value[7:].strip()


def _token_ok(token: str | None, tokens: tuple[str, ...]) -> bool:
    if token is None:
        return False
    return any(hmac.compare_digest(token.encode(), t.encode()) for t in tokens)


def _admin_ok(scope: Scope, token: str | None, tokens: tuple[str, ...]) -> bool:
    """A configured admin token, or the fleet's own (a service holding the fleet secret: the console); with none
    configured, also a caller on this host, unless a proxy relayed it (a reverse proxy on the same host would
    otherwise make every client it fronts an admin)."""
    if _token_ok(token, tokens) or _token_ok(token, (admin_token(),)):
        return True
    return not tokens and local_caller(scope)


class RateLimiter:
    """A token bucket per client (its token, else its address)."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}

    def allow(self, client: str, rate: float, burst: int) -> bool:
        now = time.monotonic()
        tokens, last = self._buckets.get(client, (float(burst), now))
        tokens = min(float(burst), tokens + (now - last) * rate)
        if tokens < 1.0:
            self._buckets[client] = (tokens, now)
            return False
        self._buckets[client] = (tokens - 1.0, now)
        if len(self._buckets) > 100_000:
            self._buckets.clear()
        return True


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, gw: Gateway) -> None:
        self.app = app
        self.gw = gw
        self.limiter = RateLimiter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        sec = self.gw.cfg.security
        found = _checked_headers(scope)
        token = _bearer(found.get(b"authorization"))
        try:
            if not host_allowed(sec.accepted_host_headers, found.get(b"host")):
                raise Forbidden("Host header not allowed (DNS-rebinding guard)")
            if not origin_allowed(sec, found.get(b"origin")):
                raise Forbidden("Origin not allowed")
            if segments(scope["path"])[0] == "admin":  # the router's reading of the same canonical path
                if not _admin_ok(scope, token, sec.admin_tokens):
                    raise Unauthorized("admin endpoints need an admin bearer token")
            elif sec.tokens and not _token_ok(token, sec.tokens):
                raise Unauthorized("missing or invalid bearer token")
            if sec.rate_per_s > 0:
                who = (
                    hashlib.sha256(token.encode()).hexdigest()[:16]
                    if token
                    else str((scope.get("client") or ("?",))[0])
                )
                if not self.limiter.allow(who, sec.rate_per_s, sec.rate_burst):
                    raise RateLimited(f"rate limit of {sec.rate_per_s:g} requests/s exceeded")
        except (Forbidden, Unauthorized, RateLimited) as exc:
            extra = (
                [(b"www-authenticate", b'Bearer realm="toolfleet-gateway"')] if isinstance(exc, Unauthorized) else []
            )
            if isinstance(exc, RateLimited):
                extra.append((b"retry-after", b"1"))
            await send_error(send, None, exc, extra)
            return
        trace = found.get(b"traceparent")
        trace_id = trace.split("-")[1] if trace and trace.count("-") == 3 else None
        with request_context(found.get(_REQUEST_ID), trace_id=trace_id):
            await self.app(scope, receive, send)
