"""The request path, made canonical once, at the outermost ASGI layer: every later decision reads that one.

The security check and the router used to read the path each their own way: the check read it as sent
(`//admin/tools` does not start with `/admin`, so no admin token was asked), the router with its slashes
stripped (so it served the admin route). Now `CanonicalPath` rewrites `scope["path"]` and `raw_path` before
anything else reads them, and both split the result with `segments`:

* repeated slashes collapse and a trailing slash goes (`//admin/tools/` is `/admin/tools`);
* `.` and `..` segments are resolved (RFC 3986 5.2.4), percent-encoded or not; a `..` above the root is refused;
* a path whose meaning depends on who decodes it is refused with 400: a percent-encoded `/`, `\\`, `%` (double
  encoding) or control character, and a raw backslash or control character.

Case is kept: namespaces are case-sensitive, so `/ADMIN/tools` is no route, and is not an admin one either.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.asgi import send_error
from gateway.errors import InvalidRequest

_PLAIN = re.compile(rb"(?:/[A-Za-z0-9_~!$&'()*+,;=:@-][A-Za-z0-9_.~!$&'()*+,;=:@-]*)+")
"""A path already canonical as sent: no empty, dot or percent-encoded segment, no trailing slash (the hot path)."""
_AMBIGUOUS = re.compile(rb"%(?:2[fF]|5[cC]|25|[01][0-9a-fA-F]|7[fF])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


def canonical(path: str, raw: bytes | None) -> str:
    """The canonical form of a decoded `path` (`raw`: as sent, percent-encoding and all, when the server says)."""
    if raw is not None and (bad := _AMBIGUOUS.search(raw)):
        raise InvalidRequest(f"ambiguous request path: it percent-encodes {bad.group().decode()}")
    if _CONTROL.search(path):
        raise InvalidRequest("ambiguous request path: it holds a backslash or a control character")
    out: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if not out:
                raise InvalidRequest("request path climbs above the root")
            out.pop()
        elif segment not in ("", "."):
            out.append(segment)
    return "/" + "/".join(out)


def segments(path: str) -> list[str]:
    """The segments of a canonical path (`/` has one, empty): what the security check and the router both read."""
    return path[1:].split("/")


class CanonicalPath:
    """The outermost middleware: a request's path is canonical before any other layer sees it, or it is refused."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and (raw is None or not _PLAIN.fullmatch(raw)):
            try:
                path = canonical(scope["path"], raw)
            except InvalidRequest as exc:
                await send_error(send, None, exc)
                return
            scope = {**scope, "path": path, "raw_path": quote(path).encode("ascii")}
        await self.app(scope, receive, send)
