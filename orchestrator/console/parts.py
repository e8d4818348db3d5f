"""What every console page is built over: the orchestrator's parts, the sessions and the gateway's admin API."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import structlog
from fastapi import Request
from fastapi.responses import Response

from orchestrator.api.deps import Deps
from orchestrator.console.gwadmin import GatewayAdmin
from orchestrator.console.render import form, page, to
from orchestrator.console.session import ConsoleSessions, Session, csrf_ok
from orchestrator.console.throttle import FleetThrottle, LoginThrottle

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Parts:
    deps: Deps
    sessions: ConsoleSessions
    gateway: GatewayAdmin
    clients: frozenset[str] = frozenset()  # the configured client keys' ids (the Keys page lists each)
    started: float = field(default_factory=time.time)  # this replica's start, for its uptime
    throttle: FleetThrottle = field(default_factory=lambda: FleetThrottle(LoginThrottle()))  # failed logins


async def posted(request: Request, parts: Parts) -> tuple[Session, dict[str, str]] | Response:
    """A console POST's session and form, or the answer refusing it: no session goes to login, a missing or wrong
    CSRF token is a 403 page (nothing is done)."""
    session = parts.sessions.check(request)
    if session is None:
        return to("/login")
    fields = await form(request)
    if not csrf_ok(session.csrf, fields):
        log.warning("console.csrf_refused", path=request.url.path, admin=session.admin)
        message = "Refused: the form's CSRF token is missing or wrong. Reload the page and try again."
        return page(request, "error.html", 403, user=session, error=message)
    return session, fields
