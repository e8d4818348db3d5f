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


class HeaderRules:
    """A compiled `HeaderPolicy`: `apply` maps client headers to the headers sent upstream."""

    def __init__(self, policy: HeaderPolicy) -> None:
        self._names: dict[str, str] = {h: h for h in policy.forward}
        self._names.update({src.lower(): dst.lower() for src, dst in policy.rename.items()})
        self._static = {k.lower(): v for k, v in policy.static.items()}

    def apply(self, headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
        out: dict[str, str] = {}
        drop: set[str] = set()
        for raw_name, raw_value in headers:
            name = raw_name.decode("latin-1").lower()
            if name == "connection":
                drop.update(t.strip().lower() for t in raw_value.decode("latin-1").split(","))
                continue
            if name in HOP_BY_HOP or name == "mcp-session-id":
                continue
            if name in PROTOCOL or name in TRACE_CONTEXT or name.startswith("mcp-"):
                out[name] = raw_value.decode("latin-1").strip(" \t")  # the value without its OWS (RFC 9110 5.5)
            elif (target := self._names.get(name)) is not None:
                out[target] = raw_value.decode("latin-1")
        for name in drop:
            if name not in PROTOCOL:
                out.pop(name, None)
        out.update(self._static)
        return out
