"""Gateway faults and the one place they become JSON-RPC errors (and HTTP statuses)."""

from __future__ import annotations

import json
import sys
from typing import Any

import structlog
from mcp_types import CallToolResult, TextContent

log = structlog.get_logger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Server-defined codes (-32000..-32099): the side at fault is in the name.
SESSION_NOT_FOUND = -32001
SESSION_LOST = -32002
UPSTREAM_UNAVAILABLE = -32003
UPSTREAM_TIMEOUT = -32004
UPSTREAM_BAD_RESPONSE = -32005
TOOL_NOT_APPROVED = -32006
UNAUTHORIZED = -32010
FORBIDDEN = -32011
RATE_LIMITED = -32029


class GatewayError(Exception):
    """A fault with a JSON-RPC code and the HTTP status to answer it with."""

    code = INTERNAL_ERROR
    status = 200
    """HTTP status on streamable HTTP: 200 when the error answers a request (any client reads it);
    4xx only for faults of the HTTP exchange itself."""

    def __init__(self, message: str, *, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class ParseError(GatewayError):
    code, status = PARSE_ERROR, 400


class InvalidRequest(GatewayError):
    code, status = INVALID_REQUEST, 400


class InvalidParams(GatewayError):
    code, status = INVALID_PARAMS, 400


class BodyTooLarge(GatewayError):
    code, status = INVALID_REQUEST, 413


class UnknownNamespace(GatewayError):
    code, status = METHOD_NOT_FOUND, 404


class UnknownSession(GatewayError):
    """The client named an MCP session this gateway does not hold (404 tells it to re-initialize)."""

    code, status = SESSION_NOT_FOUND, 404


class ToolRefusal(GatewayError):
    """A call's arguments the gateway cannot act on: answered as the tool's error result (`isError`), which
    the model reads and can correct, as the MCP spec asks for argument errors and as the tool server itself
    answers them; `code` only counts it."""


class UnknownHandle(ToolRefusal):
    """A call names a session handle no replica of the namespace holds, or one that cannot be this
    namespace's."""

    code = SESSION_NOT_FOUND


class SessionLost(GatewayError):
    """The replica holding the session died: its state is gone, so we say so rather than start afresh."""

    code = SESSION_LOST


class TaskLost(GatewayError):
    """The replica that ran an MCP task is gone: the task's work and result went with it."""

    code = SESSION_LOST


class Unavailable(GatewayError):
    """No healthy replica, or the replica could not be reached: our side, not the caller's."""

    code = UPSTREAM_UNAVAILABLE


class Unreached(Unavailable):
    """The replica did not take the connection (it stopped, or is draining after SIGTERM): the request never
    left, so a call on a session no replica holds yet may go to another replica, whatever its method."""


class Unanswered(Unavailable):
    """The replica closed the connection before a byte of answer. From a replica that said it drains, this is
    its stop: the call was never run or was cut off with the sandbox it ran in, so like `Unreached` it may go to
    another replica, which says the session's state was reset."""


class Draining(Unreached):
    """The replica is draining and refused to open a session (HTTP 503, `Toolfleet-Draining`): it did nothing,
    so the call may go to another replica like a refused connection."""


class UpstreamTimeout(GatewayError):
    code = UPSTREAM_TIMEOUT


class BadUpstream(GatewayError):
    """The upstream answered something that is not MCP."""

    code = UPSTREAM_BAD_RESPONSE


class ToolNotApproved(GatewayError):
    code = TOOL_NOT_APPROVED


class Unauthorized(GatewayError):
    code, status = UNAUTHORIZED, 401


class Forbidden(GatewayError):
    code, status = FORBIDDEN, 403


class RateLimited(GatewayError):
    code, status = RATE_LIMITED, 429


def _store_outage(exc: BaseException) -> bool:
    """Whether `exc` is the shared store (Redis) out of reach: a restart or a network cut, our side and
    temporary, so the caller gets the unavailable error rather than a vague internal one. Redis is imported
    only by gateways that configure it; without the module loaded no error can be one of its."""
    errors = sys.modules.get("redis.exceptions")
    return errors is not None and isinstance(exc, errors.ConnectionError | errors.TimeoutError)


def to_error(exc: BaseException) -> GatewayError:
    """Every exception that reaches a client passes here; unknown ones are logged and kept vague."""
    match exc:
        case GatewayError():
            return exc
        case json.JSONDecodeError() | UnicodeDecodeError():
            return ParseError("request body is not valid JSON")
        case _ if _store_outage(exc):
            log.warning("store.unavailable", error=str(exc))  # its text names the store's address: logged, not told
            return Unavailable(f"shared store (Redis) unavailable: {type(exc).__name__}")
        case _:
            log.error("gateway.unhandled", error_type=type(exc).__name__, exc_info=exc)
            return GatewayError("internal gateway error")


def error_body(request_id: Any, exc: BaseException) -> tuple[int, bytes]:
    """The HTTP status and JSON-RPC body for `exc` answering the request `request_id`: an error, or for a
    `ToolRefusal` the tool's error result."""
    err = to_error(exc)
    if isinstance(err, ToolRefusal):
        result = CallToolResult(content=[TextContent(type="text", text=err.message)], is_error=True)
        answer = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return 200, json.dumps({"jsonrpc": "2.0", "id": request_id, "result": answer}).encode()
    error: dict[str, Any] = {"code": err.code, "message": err.message}
    if err.data is not None:
        error["data"] = err.data
    return err.status, json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
