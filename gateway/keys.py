"""Session keys: what the pin table is keyed by.

A client that sends `x-session-id` is keyed by that header, so its pin outlives any one MCP session;
one that does not is keyed by its gateway MCP session id. The stored form (`h:<id>` / `s:<id>`) is the
one older gateways wrote, so a shared Redis pin table keeps reading across an upgrade.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["header", "session"]

_TAG: dict[Kind, str] = {"header": "h", "session": "s"}
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

    @property
    def by_header(self) -> bool:
        return self.kind == "header"

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
