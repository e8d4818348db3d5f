"""How every console page is answered: Jinja2 templates, the display filters, and the headers each carries.

Every response under `/console` gets a strict CSP (`default-src 'self'`, no inline script, `frame-ancestors
'none'`), no caching and no referrer (`ConsoleHeaders`). Times are shown relative with the absolute time on
hover; numbers carry their unit.
"""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.guard.auth import CONSOLE

HERE = Path(__file__).parent
NOTICE = "toolfleet_console_notice"
NOTICE_S = 60  # a notice not shown within this long (the redirect was not followed) is dropped
NOTICE_MOST = 1000  # characters: a cookie holds 4 KiB at most
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class ConsoleHeaders:
    """Adds `HEADERS` to every response under `/console`, redirects and errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == CONSOLE or path.startswith(CONSOLE + "/")):
            return await self.app(scope, receive, send)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


def when(ts: float | None, now: float | None = None) -> Markup:
    """`<time>` with a relative text ("3 min ago"), the absolute UTC time as its title and datetime, and the Unix
    time (`data-at`) from which the Live page's script keeps the relative text current."""
    if ts is None:
        return Markup("&mdash;")
    stamp = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    text = f"{duration((now or time.time()) - ts)} ago"
    return Markup('<time datetime="{0}" title="{0}" data-at="{2}">{1}</time>').format(stamp, text, f"{ts:.3f}")


def duration(seconds: float) -> str:
    """Seconds as the largest unit that keeps them readable: 850 ms, 12 s, 4 min, 3 h, 2 d."""
    seconds = max(seconds, 0.0)
    for limit, unit, size in ((1, "ms", 0.001), (60, "s", 1), (3600, "min", 60), (86400, "h", 3600)):
        if seconds < limit:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds / 86400:.1f} d"


def size(n: float) -> str:
    """Bytes in the largest binary unit that keeps them readable: 512 B, 3.2 KiB, 41.0 MiB, 1.2 GiB."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def percent(part: float | None, whole: float | None) -> str:
    return "not reported" if not whole or part is None else f"{100 * part / whole:.1f} %"


ENV = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
ENV.filters.update(when=when, duration=duration, size=size)
ENV.globals.update(percent=percent)


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A template rendered with what every page shows (the nav, the session's CSRF token, the current path, the
    notice the last action left), which it then drops."""
    sent = request.cookies.get(NOTICE)
    body = ENV.get_template(template).render(path=request.url.path, now=time.time(), notice=_unpacked(sent), **context)
    response = HTMLResponse(body, status)
    if sent is not None:
        response.delete_cookie(NOTICE, path=CONSOLE)
    return response


def to(path: str) -> RedirectResponse:
    """A 303 after a form (post/redirect/get)."""
    return RedirectResponse(CONSOLE + path, 303)


def told(request: Request, path: str, message: str) -> RedirectResponse:
    """`to`, with a notice for the next page. It travels in a cookie, not in the URL: a link someone else made
    could otherwise put words of theirs on an operator's page."""
    response = to(path)
    packed = base64.urlsafe_b64encode(message[:NOTICE_MOST].encode()).decode()
    cookie(response, request, NOTICE, packed, NOTICE_S)
    return response


def _unpacked(sent: str | None) -> str | None:
    try:
        return base64.urlsafe_b64decode(sent.encode()).decode() if sent else None
    except ValueError:  # not ours (binascii.Error and UnicodeDecodeError are both ValueErrors)
        return None


def cookie(response: Response, request: Request, name: str, value: str, max_age: int) -> None:
    """A console cookie: this path only, no script access, never sent from another site, https-only on https."""
    secure = request.url.scheme == "https"
    response.set_cookie(name, value, max_age, path=CONSOLE, secure=secure, httponly=True, samesite="strict")


async def form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the first value of each); the body limit middleware bounds its size."""
    return dict(parse_qsl((await request.body()).decode("utf-8", "replace"), keep_blank_values=True))
