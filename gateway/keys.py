"""Session keys: what the pin table is keyed by.

A client that sends `x-session-id` is keyed by that header, so its pin outlives any one MCP session; a
2026-07-28 client that asked a tool for a session handle is keyed by the handle; any other by its gateway
MCP session id; a 2026-07-28 retry of an `input_required` answer by the digest of its `requestState`, so
it goes back to the replica that asked. The stored forms (`h:<id>` / `s:<id>`, and `k:` / `r:`) keep the
ones older gateways wrote, so a shared Redis pin table keeps reading across an upgrade.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

Kind = Literal["header", "session", "handle", "retry"]

_TAG: dict[Kind, str] = {"header": "h", "session": "s", "handle": "k", "retry": "r"}
_KIND: dict[str, Kind] = {tag: kind for kind, tag in _TAG.items()}


@dataclass(frozen=True, slots=True)
class SessionKey:
    kind: Kind
    id: str

    @classmethod
    def header(cls, xsid: str | None) -> SessionKey | None:
        """The key of a client's `x-session-id`, or None when it sent none."""
        return cls("header", xsid) if xsid else None

    @classmethod
    def session(cls, sid: str) -> SessionKey:
        return cls("session", sid)

    @classmethod
    def handle(cls, handle: str) -> SessionKey:
        """The key of a session handle a tool minted (the tool's `session_handle` argument)."""
        return cls("handle", handle)

    @classmethod
    def retry(cls, request_state: str) -> SessionKey:
        """The key of an `input_required` answer's `requestState`: its retry goes back to the replica that asked."""
        return cls("retry", hashlib.sha256(request_state.encode()).hexdigest()[:32])

    @property
    def by_header(self) -> bool:
        return self.kind == "header"

    @property
    def by_session(self) -> bool:
        """Keyed by a gateway MCP session (whose record and pin end together)."""
        return self.kind == "session"

    def __str__(self) -> str:
        return f"{_TAG[self.kind]}:{self.id}"

    @classmethod
    def parse(cls, raw: str) -> SessionKey:
        """The key of a stored string form; a string in no known form is a ValueError."""
        tag, sep, ident = raw.partition(":")
        kind = _KIND.get(tag)
        if not sep or kind is None:
            raise ValueError(f"not a session key: {raw!r}")
        return cls(kind, ident)
