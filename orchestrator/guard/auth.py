"""Client API keys: a bearer `Authorization` (the openai SDK's `api_key`) on every route but `/healthz`.

The key's id, a SHA-256 of the key, is the *owner* of every response the key creates: stored with the
record, so every replica sharing the store answers another key's ids with 404. Keys themselves are
held only in memory and never logged. Without configured keys every caller is the one owner
`anonymous` (the single-user default on loopback; a start-up warning says so beyond it).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.errors import error_body
from orchestrator.guard.limits import LimitExceeded, RequestRate
from orchestrator.settings import OrchestratorSettings
from toolkit.loopback import local_caller, loopback

log = structlog.get_logger(__name__)

ANONYMOUS = "anonymous"
OPEN_PATHS = frozenset({"/healthz"})
CONSOLE = "/console"  # the operator console authenticates its own way: an admin key once, then a session cookie
ADMIN_PREFIX = "admin:"


def key_id(key: str) -> str:
    """The owner id of a key: safe to store and log, and the same on every replica."""
    return "key_" + hashlib.sha256(b"toolfleet-api-key\0" + key.encode()).hexdigest()[:32]


def _file_lines(settings: OrchestratorSettings) -> list[str]:
    if not settings.api_keys_file:
        return []
    lines = (line.split("#", 1)[0].strip() for line in Path(settings.api_keys_file).read_text().splitlines())
    return [line for line in lines if line]


def load_keys(settings: OrchestratorSettings) -> list[str]:
    """Client keys from the flag / environment variable and the keys file (one per line, `#` comments); the
    file's `admin:` lines are the console's, not clients'."""
    keys = list(settings.api_keys)
    for key in _file_lines(settings):
        if not key.startswith(ADMIN_PREFIX) and key not in keys:
            keys.append(key)
    return keys


def load_admin_keys(settings: OrchestratorSettings) -> list[str]:
    """Operator keys: `--admin-keys` and the keys file's `admin:KEY` lines. Kept apart from the client keys so an
    operator's key runs no response and a client's never opens the console."""
    keys = list(settings.admin_keys)
    for line in _file_lines(settings):
        if line.startswith(ADMIN_PREFIX) and (key := line.removeprefix(ADMIN_PREFIX).strip()) not in keys:
            keys.append(key)
    return [key for key in keys if key]


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def _unauthorized(message: str, code: str | None) -> JSONResponse:
    return JSONResponse(
        error_body(message, "invalid_request_error", None, code), 401, headers={"www-authenticate": "Bearer"}
    )


class ApiKeys:
    """The configured keys by their digest; `owner` answers the key id of a presented key."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._ids = {hashlib.sha256(k.encode()).digest(): key_id(k) for k in keys}

    @property
    def enabled(self) -> bool:
        return bool(self._ids)

    def ids(self) -> frozenset[str]:
        return frozenset(self._ids.values())

    def owner(self, token: str) -> str | None:
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for known, kid in self._ids.items():  # compare with every key in constant time
            if hmac.compare_digest(known, digest):
                found = kid
        return found


class AuthMiddleware:
    """Authenticates every request but `OPEN_PATHS`, the console's (`console/session.py`) and `/metrics` (an
    operator's: `operator`), applies the per-key request rate, and leaves the owner in `request.state.owner`
    (and on the open paths whether the caller is an operator in `request.state.operator`: `/healthz` shows them
    its details)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: ApiKeys,
        rate: RequestRate,
        metrics_token: str | None,
        counted: Callable[[str], None] = lambda owner: None,
    ) -> None:
        self.app, self.keys, self.rate, self.metrics_token = app, keys, rate, metrics_token
        self.counted = counted  # told of each authenticated request's owner (`usage`)

    def operator(self, scope: Scope) -> bool:
        """An operator presents `--metrics-token`; without one configured, a caller on loopback is one (the
        fleet's own scrape, a sidecar), so the fleet's addresses and load are never shown to anyone else."""
        if self.metrics_token:
            return hmac.compare_digest((_bearer(scope) or "").encode(), self.metrics_token.encode())
        return local_caller(scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or _console(scope["path"]):
            return await self.app(scope, receive, send)
        if scope["path"] in OPEN_PATHS or scope["path"] == "/metrics":  # a WebSocket: on the upgrade
            operator = self.operator(scope)
            if scope["path"] == "/metrics" and not operator:
                return await self._not_operator()(scope, receive, send)
            scope.setdefault("state", {})["operator"] = operator
            return await self.app(scope, receive, send)
        token = _bearer(scope)
        owner = ANONYMOUS
        if self.keys.enabled:
            if token is None:
                message = "You didn't provide an API key. Send it as a bearer token: Authorization: Bearer KEY."
                return await _unauthorized(message, None)(scope, receive, send)
            if (found := self.keys.owner(token)) is None:
                return await _unauthorized("Incorrect API key provided.", "invalid_api_key")(scope, receive, send)
            owner = found
        try:
            self.rate.admit(owner)
        except LimitExceeded as exc:
            body = error_body(str(exc), exc.etype, None, exc.code)
            return await JSONResponse(body, 429, headers=exc.headers)(scope, receive, send)
        scope.setdefault("state", {})["owner"] = owner
        self.counted(owner)
        with structlog.contextvars.bound_contextvars(key_id=owner):
            await self.app(scope, receive, send)

    def _not_operator(self) -> JSONResponse:
        if self.metrics_token:
            return _unauthorized("/metrics needs its bearer token.", "invalid_api_key")
        message = "/metrics answers loopback callers only; set --metrics-token to scrape it from elsewhere."
        return JSONResponse(error_body(message, "invalid_request_error", None, "metrics_forbidden"), 403)


def _console(path: str) -> bool:
    return path == CONSOLE or path.startswith(CONSOLE + "/")


def warn_if_open(settings: OrchestratorSettings, keys: ApiKeys) -> None:
    """A service reachable beyond loopback without keys lets anyone read and run everything: say so."""
    if not keys.enabled and not loopback(settings.host):
        message = "listening beyond loopback with no API keys: every client can use every response"
        log.warning("auth.disabled", host=settings.host, message=message)
