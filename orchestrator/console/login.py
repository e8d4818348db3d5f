"""`/console/login` and `/console/logout`: an admin key posted once for a session cookie.

A client key, an unknown key and no key are refused alike (401, the same words: the page says nothing about
which client keys exist); too many failures from one address, or from all, are a 429 for a while
(`throttle.py`; counted fleet-wide with a Redis store). The login form carries its own double-submit nonce
(`LOGIN_COOKIE`) since no session exists yet to bind a token to.
"""

from __future__ import annotations

import secrets

import structlog
from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.console.parts import Parts
from orchestrator.console.render import cookie, form, page, to, told
from orchestrator.console.session import COOKIE, LOGIN_COOKIE, SESSION_S, csrf_ok

log = structlog.get_logger(__name__)


def _login_page(request: Request, status: int, error: str | None, parts: Parts) -> Response:
    nonce = secrets.token_hex(16)
    closed = None if parts.sessions.enabled else "No admin key is configured: the console is closed."
    response = page(request, "login.html", status, csrf=nonce, error=error or closed, user=None)
    cookie(response, request, LOGIN_COOKIE, nonce, 600)
    return response


def routes(router: APIRouter, parts: Parts) -> None:
    """Login (GET the form, POST the key) and logout."""

    @router.get("/console/login")
    async def login_form(request: Request) -> Response:
        return _login_page(request, 200, None, parts)

    @router.post("/console/login")
    async def login(request: Request) -> Response:
        address = request.client.host if request.client else "unknown"
        if wait := await parts.throttle.retry_after(address):
            log.warning("console.login_throttled", address=address, retry_after_s=wait)
            refused = _login_page(request, 429, f"Too many failed logins: try again in {wait} s.", parts)
            refused.headers["retry-after"] = str(wait)
            return refused
        fields = await form(request)
        if not csrf_ok(request.cookies.get(LOGIN_COOKIE, ""), fields):
            log.warning("console.csrf_refused", path=request.url.path)
            return _login_page(request, 403, "The form expired or was not ours (CSRF check failed): try again.", parts)
        admin = parts.sessions.admins.owner(fields.get("key", "").strip()) if fields.get("key") else None
        if admin is None:
            await parts.throttle.failed(address)
            log.info("console.login_refused", address=address)
            return _login_page(request, 401, "That is not an admin key.", parts)
        log.info("console.login", admin=admin)
        response = to("/fleet")
        cookie(response, request, COOKIE, parts.sessions.issue(admin), SESSION_S)
        response.delete_cookie(LOGIN_COOKIE, path="/console")
        return response

    @router.post("/console/logout")
    async def logout(request: Request) -> Response:
        session = parts.sessions.check(request)
        if session is None or not csrf_ok(session.csrf, await form(request)):
            return to("/login")
        response = told(request, "/login", "Logged out.")
        response.delete_cookie(COOKIE, path="/console")
        return response
