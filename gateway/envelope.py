"""The 2026-07-28 era at the front door: its mandatory headers checked, and the session handle a call names.

A 2026-07-28 request repeats its body in headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, and an
`Mcp-Param-*` header per argument its tool declares with `x-mcp-header`) so that intermediaries can route
without parsing bodies. The gateway routes on them, so it checks them itself, with the SDK's own ladder
(`mcp.shared.inbound`), whether or not the upstream would: a request whose headers disagree with its body
is refused with 400 and -32020 before it reaches a replica. 2025-era and legacy SSE requests carry no
such headers and are not checked here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gateway.errors import GatewayError
from toolkit.handles import ARGUMENT as HANDLE_ARGUMENT
from toolkit.handles import NEW as NEW_HANDLE

_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower().encode("latin-1")

__all__ = ["HANDLE_ARGUMENT", "NEW_HANDLE", "Refused", "check", "request_state", "session_handle"]


class Refused(GatewayError):
    """A request the spec says to refuse at the door; code and status are the SDK ladder's."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message, data=data)
        self.code = code
        self.status = ERROR_CODE_HTTP_STATUS.get(code, 400)


def check(msg: dict[str, Any], raw: Iterable[tuple[bytes, bytes]], tools: list[Any] | None) -> None:
    """Refuse a 2026-07-28 request whose routing headers disagree with its body (or repeat); `tools`: the
    namespace's last known tool list, for the `Mcp-Param-*` headers of a `tools/call`."""
    if "id" not in msg or "method" not in msg:
        return
    raw = list(raw)
    # the common case, a 2025-era request, is told by one header (its last copy, as a dict of them keeps):
    # decode the rest only for a 2026-07-28 one
    version: bytes | None = None
    for name, value in raw:
        if name.lower() == _VERSION_HEADER:
            version = value
    if version is None or version.decode("latin-1").strip(" \t") in HANDSHAKE_PROTOCOL_VERSIONS:
        return
    pairs = [(k.decode("latin-1").lower(), v.decode("latin-1").strip(" \t")) for k, v in raw]
    headers = dict(pairs)
    if (duplicated := find_duplicated_routing_header(pairs)) is not None:
        raise Refused(-32020, f"{duplicated} header appears more than once")
    verdict = classify_inbound_request(msg, headers=headers)
    if isinstance(verdict, InboundLadderRejection):
        raise Refused(verdict.code, verdict.message, verdict.data)
    params = msg.get("params") or {}
    if msg["method"] != "tools/call" or not isinstance(params.get("arguments", {}), dict):
        return
    schema = next((t.get("inputSchema") for t in tools or [] if t.get("name") == params.get("name")), None)
    if schema is not None and (bad := validate_mcp_param_headers(schema, params.get("arguments") or {}, headers)):
        raise Refused(bad.code, bad.message, bad.data)


def session_handle(msg: dict[str, Any]) -> str | None:
    """The session handle a `tools/call` names (its `session_handle` argument), if any."""
    params = msg.get("params")
    if msg.get("method") != "tools/call" or not isinstance(params, dict):
        return None
    arguments = params.get("arguments")
    handle = arguments.get(HANDLE_ARGUMENT) if isinstance(arguments, dict) else None
    return handle if isinstance(handle, str) and handle else None


def request_state(msg: dict[str, Any]) -> str | None:
    """The `requestState` a 2026-07-28 retry of an `input_required` answer echoes, if any."""
    params = msg.get("params")
    state = params.get("requestState") if isinstance(params, dict) else None
    return state if isinstance(state, str) and state else None
