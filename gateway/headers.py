"""Header policy: which client headers reach the upstream, under which names."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config import HeaderPolicy

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
PROTOCOL = frozenset({"accept", "content-type", "last-event-id"})
"""Headers the MCP transport itself needs; `mcp-*` headers (but the session id, which we map) go too."""
TRACE_CONTEXT = frozenset({"traceparent", "tracestate"})
"""W3C trace context goes to every upstream by default (the gateway's own span replaces the parent id)."""


_Fate = tuple[str, bool] | None
"""What becomes of a client header: (its upstream name, whether its value loses its OWS), or None: dropped."""
_PLAN_LIMIT = 4096
"""Header names a plan remembers; clients choose names, so past this the rest are decided afresh each time."""


class HeaderRules:
    """A compiled `HeaderPolicy`: `apply` maps client headers to the headers sent upstream."""

    def __init__(self, policy: HeaderPolicy) -> None:
        self._names: dict[str, str] = {h: h for h in policy.forward}
        self._names.update({src.lower(): dst.lower() for src, dst in policy.rename.items()})
        self._static = {k.lower(): v for k, v in policy.static.items()}
        self._plan: dict[bytes, _Fate] = {}
        """The fate of each raw header name seen: every request sends the same few, so each is decided once."""

    def _fate(self, raw_name: bytes) -> _Fate:
        name = raw_name.decode("latin-1").lower()
        if name in HOP_BY_HOP or name == "mcp-session-id":
            return None
        if name in PROTOCOL or name in TRACE_CONTEXT or name.startswith("mcp-"):
            return name, True  # the value without its OWS (RFC 9110 5.5)
        target = self._names.get(name)
        return None if target is None else (target, False)

    def apply(self, headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
        out: dict[str, str] = {}
        drop: set[str] = set()
        plan = self._plan
        for raw_name, raw_value in headers:
            if raw_name in plan:
                fate = plan[raw_name]
            elif raw_name.lower() == b"connection":  # never planned: its value names more headers to drop
                drop.update(t.strip().lower() for t in raw_value.decode("latin-1").split(","))
                continue
            else:
                fate = self._fate(raw_name)
                if len(plan) < _PLAN_LIMIT:
                    plan[raw_name] = fate
            if fate is not None:
                value = raw_value.decode("latin-1")
                out[fate[0]] = value.strip(" \t") if fate[1] else value
        for name in drop:
            if name not in PROTOCOL:
                out.pop(name, None)
        out.update(self._static)
        return out
