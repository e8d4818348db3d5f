"""`mcp_call` items (a request's MCP servers, and the container namespace without a shell tool), their
approvals (`mcp_approval_request`, answered by the client's `mcp_approval_response` in a later response),
and the structured errors of failed calls."""

from __future__ import annotations

import re
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.guard import approvals
from orchestrator.kinds.base import (
    DESCRIBED,
    DIRECT_ONLY,
    NOT_DEFERRED,
    EchoContext,
    Field,
    Kind,
    Parsing,
    Stream,
    ToolStream,
    answer,
)
from orchestrator.request.params import HONOURED, REFUSED
from orchestrator.request.schema import McpServer, Requirement, Toolset
from orchestrator.responses.events import Item, ResponseBuilder, new_id
from orchestrator.responses.run import Run
from orchestrator.tools import ToolOutcome
from toolkit.wire import is_reserved

_MCP_HTTP_CODES = {"unavailable": 503, "timeout": 504}
_MCP_PROTOCOL_CODES = {"rejected": -32602}  # JSON-RPC invalid params: bad arguments or a tool not allowed
REDACTED = "<redacted>"
# Headers a client may not set on an MCP tool (besides the fleet's, `toolkit.wire.is_reserved`): what the
# orchestrator and the MCP transport set themselves, and what HTTP owns (framing, the connection, proxies).
RESERVED_HEADERS = frozenset(
    "x-session-id mcp-session-id mcp-protocol-version x-request-id host content-length transfer-encoding connection"
    " upgrade te trailer trailers keep-alive expect proxy-authorization proxy-authenticate proxy-connection".split()
)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP field name (RFC 9110 5.1)
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")  # visible ASCII, space and tab: no CR, LF, NUL or other control


def namespace_of(label: str) -> str:
    """The Harmony namespace a `server_label` is shown to the model as: the label itself when it is an
    identifier, else with each other character as `_` (`my-server` -> `my_server`). Items echo the label."""
    name = re.sub(r"\W", "_", label, flags=re.ASCII)
    return name if name.isidentifier() else f"_{name}"


def label_of(r: Run, ns: str) -> str:
    """The `server_label` of the request's MCP server shown as `ns` (a built-in namespace is its own)."""
    server = r.toolset.mcp.get(ns)
    return server.label if server is not None else ns


class McpStream(ToolStream):
    delta_event = "response.mcp_call_arguments.delta"
    done_event = "response.mcp_call_arguments.done"
    field = "arguments"
    shows_arguments = True

    def __init__(self, r: Run, ns: str, fn: str, approval_id: str | None = None) -> None:
        item = {
            "id": new_id("mcp"),
            "type": "mcp_call",
            "server_label": label_of(r, ns),
            "name": fn,
            "arguments": "",
            "status": "in_progress",
            "output": None,
            "error": None,
        }
        if approval_id:
            item["approval_request_id"] = approval_id
        super().__init__(r, r.builder.add_item(item))
        self.item.event("response.mcp_call.in_progress")

    @classmethod
    def complete(cls, r: Run, msg: Message, ns: str, fn: str, approval_id: str | None = None) -> McpStream:
        """The item of a call that was not streamed (approved in an earlier response): opened whole."""
        stream = cls(r, ns, fn, approval_id)
        stream.item.event(cls.done_event, arguments=h.text_of(msg))
        return stream


class McpKind(Kind):
    """`mcp` tools: a client-named server (`server_url`), a gateway namespace by its label, or a built-in
    namespace's headers (a label that names one)."""

    tool_types = ("mcp",)
    echoes = ("mcp_call", "mcp_list_tools", "mcp_approval_request", "mcp_approval_response")
    fields = {
        "server_label": Field(HONOURED, "the namespace the model sees (see **MCP server labels**)"),
        "server_url": Field(HONOURED, "checked by the MCP server policy; none: the gateway's namespace"),
        "server_description": DESCRIBED,
        "allowed_tools": Field(HONOURED, "the others are hidden from the model and refused"),
        "require_approval": Field(HONOURED, "`always` (default), `never`, or per tool"),
        "headers": Field(HONOURED, "sent to the server, never stored or echoed"),
        "authorization": Field(HONOURED, "a bearer token to the server, never stored or echoed"),
        "allowed_callers": DIRECT_ONLY,
        "defer_loading": NOT_DEFERRED,
        "connector_id": Field(REFUSED, "no OpenAI connectors here; name a server_url"),
        "tunnel_id": Field(REFUSED, "no tunnels here; name a server_url"),
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        label = tool.get("server_label")
        if not isinstance(label, str) or not label:
            raise RequestError("mcp tools need a server_label", f"{where}.server_label")
        headers = _client_headers(tool, where)
        if label in ctx.builtin_namespaces:
            out.builtins[label] = headers
            return
        ns = namespace_of(label)
        if ns in out.mcp or ns in ctx.builtin_namespaces or ns in out.namespaces or ns == "functions":
            message = f"server_label {label!r} is shown to the model as {ns!r}, which another tool of this request uses"
            raise RequestError(message, f"{where}.server_label")
        url = tool.get("server_url") or ctx.gateway_url(label)
        if not url:
            raise RequestError(f"mcp server {label!r} needs a server_url", f"{where}.server_url")
        out.mcp[ns] = McpServer(
            label,
            url,
            headers,
            _tool_names(tool.get("allowed_tools")),
            tool.get("require_approval", "always"),
            tool.get("server_description"),
            client_named=bool(tool.get("server_url")),
        )

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        label, name = choice.get("server_label"), choice.get("name")
        ns = label if label in tools.builtins else namespace_of(label) if isinstance(label, str) else None
        if ns is None or (ns not in tools.mcp and ns not in tools.builtins):
            raise RequestError(f"tool_choice names MCP server {label!r}, which is not in tools", "tool_choice")
        target = f"{ns}.{name}" if name else f"{ns}."
        return Requirement(target, f"<|channel|>commentary to={target}", exact=bool(name))

    def echo_tool(self, tool: dict[str, Any]) -> dict[str, Any]:
        """Credentials go to the server only: never stored, never echoed (header names stay)."""
        tool = dict(tool)
        if tool.pop("authorization", None) is not None:
            tool["authorization"] = REDACTED
        if isinstance(tool.get("headers"), dict):
            tool["headers"] = {str(k): REDACTED for k in tool["headers"]}
        return tool

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return (ns == "container" and "container" in toolset.builtins) or ns in toolset.mcp

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return None if _needs_approval(r.toolset, ns, fn) else McpStream(r, ns, fn)

    def arguments(self, r: Run, msg: Message, ns: str, fn: str) -> tuple[dict[str, Any], str | None]:
        args, err = super().arguments(r, msg, ns, fn)
        server = r.toolset.mcp.get(ns)
        if err is None and server is not None and not server.shows(fn):
            err = f"Error: the tool `{fn}` is not allowed on the `{ns}` server."
        return args, err

    def begin(self, r: Run, msg: Message, ns: str, fn: str, args: dict[str, Any], stream: Stream | None) -> Item | None:
        if stream is None and _needs_approval(r.toolset, ns, fn):
            _request_approval(r, msg, ns, fn)
            return None
        stream = stream or McpStream.complete(r, msg, ns, fn)
        stream.item.update(arguments=h.text_of(msg))
        return stream.item

    def end(self, r: Run, item: Item, fn: str, outcome: ToolOutcome) -> None:
        if outcome.is_error:
            item.finish("failed", "response.mcp_call.failed", error=mcp_error(outcome.kind, outcome.text))
        else:
            item.finish("completed", "response.mcp_call.completed", output=outcome.text)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        if item.get("type") == "mcp_approval_request":  # a client-kept history: the call the model wrote
            return _echo_request(item, where, ctx)
        if item.get("type") == "mcp_approval_response" and item.get("approval_request_id"):
            ctx.approvals[item["approval_request_id"]] = bool(item.get("approve"))
            if (call := ctx.requests.get(item["approval_request_id"])) is not None:
                ctx.answered[item["approval_request_id"]] = call
        if item.get("type") != "mcp_call":
            return []  # approvals are the turn loop's (`resume_approvals`); listings are informational
        name = f"{namespace_of(str(item.get('server_label')))}.{item.get('name')}"
        return [
            h.assistant(str(item.get("arguments") or "{}"), "commentary", name, "json"),
            h.tool_result(name, str(item.get("output") or mcp_error_text(item.get("error")) or "")),
        ]


def _tool_names(value: Any) -> set[str] | None:
    if value is None:
        return None
    if isinstance(value, list):
        return set(value)
    if isinstance(value, dict):
        return set(value.get("tool_names") or [])
    raise RequestError("allowed_tools must be a list of names or {tool_names: [...]}", "tools")


def _client_headers(tool: dict[str, Any], where: str) -> dict[str, str]:
    """An MCP tool's `headers`, plus `authorization` as a bearer token. Every header is checked here, where the
    client's words enter: the same rule holds for a built-in label (the headers go to the fleet's own tool
    server) and a client-named server, and nothing is dropped quietly."""
    raw = tool.get("headers") or {}
    if not isinstance(raw, dict):
        raise RequestError("mcp headers must be an object of strings", f"{where}.headers")
    seen: set[str] = set()
    for name, value in raw.items():
        if problem := _header_problem(name, value, seen):
            raise RequestError(f"mcp header {name!r} {problem}", f"{where}.headers")
    headers: dict[str, str] = dict(raw)
    token = tool.get("authorization")
    if token is not None:
        if not isinstance(token, str) or not token or not _FIELD_VALUE.fullmatch(token):
            message = "mcp authorization must be a non-empty string of visible ASCII (no CR, LF, NUL or control)"
            raise RequestError(message, f"{where}.authorization")
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _header_problem(name: Any, value: Any, seen: set[str]) -> str | None:
    """Why a client may not send this header (None: it may): a name or value HTTP would refuse or that could
    smuggle another header (CR, LF, NUL), a name twice in two spellings, or a name the fleet, the
    orchestrator or HTTP itself owns."""
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        return "is not a valid header name"
    if not isinstance(value, str) or not _FIELD_VALUE.fullmatch(value):
        return "needs a string value of visible ASCII, spaces and tabs (no CR, LF, NUL or other control)"
    lower = name.lower()
    if lower in seen:
        return "is named twice"
    seen.add(lower)
    if is_reserved(lower):
        return "is reserved for the fleet's own services"
    if lower in RESERVED_HEADERS:
        return "is set by the orchestrator or HTTP itself"
    return None


def _echo_request(item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
    """An `mcp_approval_request` sent back as input: the call message it stands for; its answer, later in the
    same input, resumes the call (`turns.run`) whether or not `previous_response_id` is used, if the request is
    one this fleet issued (`check_issued`)."""
    label, name, approval_id = item.get("server_label"), item.get("name"), item.get("id")
    if not all(isinstance(v, str) and v for v in (label, name, approval_id)):
        raise RequestError("mcp_approval_request items need id, server_label and name", where)
    arguments = item.get("arguments")
    recipient = f"{namespace_of(label)}.{name}"
    ctx.requests[approval_id] = {"recipient": recipient, "server_label": label, "name": name}
    if not (isinstance(arguments, str) and approvals.issued(approval_id, label, name, arguments)):
        ctx.unsigned[approval_id] = where
    return [h.assistant(str(arguments or "{}"), "commentary", recipient, "json")]


def check_issued(ctx: EchoContext, messages: list[Message]) -> None:
    """Before a response starts: an answer in its input that resumes a call (its request's call is the last
    message, as `resume_approvals` reads it) must answer a request this fleet issued, unchanged; else a 400
    naming the request. A request answered and settled earlier in a kept history resumes nothing."""
    last = messages[-1] if messages else None
    for approval_id, call in ctx.answered.items():
        where = ctx.unsigned.get(approval_id)
        if where is not None and _resumes(call, last):
            message = (
                f"mcp_approval_request {approval_id!r} was not issued by this service, or was changed since:"
                " an mcp_approval_response cannot answer it"
            )
            raise RequestError(message, where)


def _resumes(call: dict[str, Any], last: Message | None) -> bool:
    """Whether an answered approval resumes its call: the conversation stopped at that call."""
    return last is not None and last.recipient == call["recipient"]


def _needs_approval(toolset: Toolset, ns: str, fn: str) -> bool:
    server = toolset.mcp.get(ns)
    return server is not None and server.shows(fn) and server.needs_approval(fn)


def _request_approval(r: Run, msg: Message, ns: str, fn: str) -> None:
    label, arguments = label_of(r, ns), h.text_of(msg)
    approval_id = approvals.issue(label, fn, arguments)
    item = {
        "id": approval_id,
        "type": "mcp_approval_request",
        "server_label": label,
        "name": fn,
        "arguments": arguments,
    }
    r.builder.add_item(item).finish(None)
    r.tools.pending[approval_id] = {"recipient": msg.recipient, "server_label": label, "name": fn}


def list_tools_item(builder: ResponseBuilder, label: str, tools: list[dict[str, Any]]) -> None:
    """The `mcp_list_tools` item of a request's MCP server: the tools the model is shown, as listed."""
    listed = [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"], "annotations": None}
        for t in tools
    ]
    item = builder.add_item({"id": new_id("mcpl"), "type": "mcp_list_tools", "server_label": label, "tools": listed})
    item.event("response.mcp_list_tools.in_progress")
    item.finish(None, "response.mcp_list_tools.completed")


async def resume_approvals(r: Run) -> None:
    """Answer the call an earlier response stopped at, as the client's `mcp_approval_response` decides. An
    approved call runs only on a server of this request's tools under the label it was asked for, and only a
    tool the model is shown there (`McpKind.arguments`): an approval never reaches a built-in namespace or a
    hidden tool."""
    for approval_id, call in list(r.tools.pending.items()):
        r.tools.pending.pop(approval_id)
        last = r.messages[-1] if r.messages else None
        if last is None or not _resumes(call, last):
            continue
        ns, fn = call["recipient"].partition(".")[0], call["name"]  # the label's namespace
        server = r.toolset.mcp.get(ns)
        if not r.tools.approvals.get(approval_id):
            answer(r, call["recipient"], "Error: the user did not approve this tool call.", last.channel)
        elif server is None or server.label != call["server_label"]:
            refusal = (
                f"Error: the MCP server `{call['server_label']}` is not in this request's tools; the call did not run."
            )
            answer(r, call["recipient"], refusal, last.channel)
        else:
            r.tools.count += 1
            outcome = await MCP.call(r, last, ns, fn, McpStream.complete(r, last, ns, fn, approval_id))
            assert outcome is not None  # a streamed call is run, never sent for approval again
            r.tools.log.append((ns, outcome.kind))
            answer(r, call["recipient"], outcome.text, last.channel)


MCP = McpKind()


def mcp_error(kind: str, text: str) -> dict[str, Any]:
    """The structured `error` of a failed mcp_call (OpenAI's McpToolCallError union), chosen by the outcome's
    kind: the tool's own error result, the server out of reach or too slow (HTTP), or a protocol refusal."""
    if kind == "tool_error":
        return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": text}]}
    if kind in _MCP_HTTP_CODES:
        return {"type": "http_error", "code": _MCP_HTTP_CODES[kind], "message": text}
    return {"type": "mcp_protocol_error", "code": _MCP_PROTOCOL_CODES.get(kind, -32603), "message": text}


def mcp_error_text(error: Any) -> str:
    """What the model reads back for an mcp_call's error: a client may echo the structured object or a string."""
    if not isinstance(error, dict):
        return str(error or "")
    if isinstance(error.get("message"), str):
        return error["message"]
    content = error.get("content")
    parts = content if isinstance(content, list) else [content]
    return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in parts if p is not None)
