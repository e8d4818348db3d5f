"""The `POST /v1/responses` request body validated at the edge and what the request's tools
enable (`Toolset`; each tool type is parsed by its kind, `kinds.toolset`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.errors import RequestError
from orchestrator.request.params import PARAMS, REFUSED
from toolkit import strictjson


class Reasoning(BaseModel):
    """`reasoning`: effort is mapped onto the model's levels (`harmony.EFFORTS`), summary is echoed (the
    reasoning itself is returned in full as `reasoning_text`, so there is nothing to summarise)."""

    model_config = ConfigDict(extra="forbid")
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class TextConfig(BaseModel):
    """`text`: the answer's format (checked in `service`) and verbosity (echoed)."""

    model_config = ConfigDict(extra="forbid")
    format: dict[str, Any] = Field(default_factory=lambda: {"type": "text"})
    verbosity: Literal["low", "medium", "high"] | None = None


def check_metadata(v: dict[str, str] | None) -> dict[str, str] | None:
    """OpenAI's bounds on `metadata` (responses and conversations alike)."""
    if v is not None and (len(v) > 16 or any(len(k) > 64 or len(x) > 512 for k, x in v.items())):
        raise ValueError("metadata holds at most 16 keys of 64 characters with values of 512")
    return v


class ResponsesRequest(BaseModel):
    # Strict, as OpenAI's API is: `"top_p": true` or `"stream": "yes"` is refused, not coerced.
    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None
    input: str | list[dict[str, Any]] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    store: bool = True
    background: bool = False
    stream: bool = False
    previous_response_id: str | None = None
    reasoning: Reasoning | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    max_tool_calls: int | None = Field(None, ge=0)
    temperature: float = Field(1.0, ge=0, le=2)  # OpenAI's defaults, sent to the worker as the values used
    top_p: float = Field(1.0, gt=0, le=1)
    include: list[str] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool = True
    user: str | None = None
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    text: TextConfig | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "in-memory", "24h"] | None = None
    prompt_cache_options: dict[str, Any] | None = None
    stream_options: dict[str, Any] | None = None
    client_metadata: dict[str, Any] | None = None
    conversation: str | dict[str, Any] | None = None  # an id, or {"id": ...}: see `conversation_id`
    context_management: list[dict[str, Any]] | None = None  # see `compact_threshold`

    def sampling(self) -> dict[str, float]:
        """The sampling values sent to the worker (and echoed: the values actually used)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
        }

    _metadata_limits = field_validator("metadata")(check_metadata)

    @property
    def compact_threshold(self) -> int | None:
        """The prompt size (tokens) past which the response compacts its context; None: it never does."""
        thresholds = []
        for i, entry in enumerate(self.context_management or []):
            where = f"context_management[{i}]"
            if entry.get("type") != "compaction" or set(entry) - {"type", "compact_threshold"}:
                raise RequestError("only {'type': 'compaction', 'compact_threshold': N} is supported", where)
            value = entry.get("compact_threshold")
            if type(value) is not int or value < 1:
                raise RequestError(
                    "compact_threshold must be a positive number of tokens", f"{where}.compact_threshold"
                )
            thresholds.append(value)
        return min(thresholds, default=None)

    @property
    def conversation_id(self) -> str | None:
        if isinstance(self.conversation, dict):
            conv_id = self.conversation.get("id")
            if not isinstance(conv_id, str):
                raise RequestError("conversation must be an id or an object with a string 'id'", "conversation")
            return conv_id
        return self.conversation


MAX_DEPTH = 64
"""How deep a request body may nest objects and arrays (a tool's `parameters` schema included): deeper is a 400
naming where, before anything recursive (the parser, validation, rendering, storing) meets it."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_Trail = tuple[Any, ...] | None  # (parent trail, key): a field's path, built only when it is named


def json_doc(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """The OpenAPI `requestBody` of a route that reads its JSON body itself (`read_json`), as `model` says."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:  # `$defs` inlined, so the schema can stand inside an OpenAPI operation
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        return [inline(v) for v in node] if isinstance(node, list) else node

    return {"requestBody": {"required": required, "content": {"application/json": {"schema": inline(schema)}}}}


async def parse_body(raw: bytes) -> ResponsesRequest:
    """The create body: JSON, an object, then validated strictly (a 400 naming what is wrong)."""
    data = await read_json(raw)
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    check_params(data)
    return ResponsesRequest.model_validate(data)


async def read_json(raw: bytes | str) -> Any:
    """`parse_json`, in a worker thread for a body over `OFF_LOOP_BYTES`: checking a large one walks every
    object and array in it (seconds for 16 MiB of `[]`), and the walk lets the event loop run meanwhile."""
    if len(raw) < OFF_LOOP_BYTES:
        return parse_json(raw)
    return await anyio.to_thread.run_sync(parse_json, raw)


OFF_LOOP_BYTES = 256 * 1024


def parse_json(raw: bytes | str) -> Any:
    """A request body (or WebSocket message) as JSON: strict UTF-8, then JSON, nested at most `MAX_DEPTH`
    deep and holding no lone surrogate (`\\ud800`, which nothing downstream can encode): each a 400, naming
    the field where there is one. Its size was bounded before it was read (`bodies`)."""
    try:
        text = raw.decode() if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise RequestError(f"the request body is not valid UTF-8 (at byte {exc.start})") from None
    try:
        data = strictjson.loads(text)
    except strictjson.NotJson as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise _too_deep(_deep_member(text)) from None
    deep = text.count("[") + text.count("{") > MAX_DEPTH
    if deep or _SURROGATE_ESCAPE.search(text):  # else neither can be there: the walk is skipped
        _check_tree(data)
    return data


def _check_tree(data: Any) -> None:
    """Walk the parsed body (iteratively: no recursion to exhaust) for depth and lone surrogates."""
    if isinstance(data, str) and _SURROGATE.search(data):
        raise RequestError("the request body is a string holding a lone UTF-16 surrogate, which is not text")
    stack: list[tuple[Any, int, _Trail]] = [(data, 1, None)] if isinstance(data, dict | list) else []
    while stack:
        value, depth, trail = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(_path(trail))
        for key, child in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(child, str):
                if _SURROGATE.search(child):
                    where = _path((trail, key))
                    raise RequestError(f"{where or 'the body'}: a lone UTF-16 surrogate is not text", where)
            elif isinstance(child, dict | list):
                stack.append((child, depth + 1, (trail, key)))
            if isinstance(key, str) and _SURROGATE.search(key):
                raise RequestError("a lone UTF-16 surrogate is not text, nor a field name", _path(trail))


def _too_deep(where: str | None) -> RequestError:
    return RequestError(f"{where or 'the request body'} nests deeper than {MAX_DEPTH} levels", where)


def _path(trail: _Trail) -> str | None:
    """`tools[0].parameters` from a walk's trail (None: the body itself)."""
    parts: list[str] = []
    while trail is not None:
        trail, key = trail
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".") or None


def _deep_member(text: str) -> str | None:
    """The top-level member of an object too deep for the parser itself (None: the body is no object)."""
    decoder, space = json.JSONDecoder(), json.decoder.WHITESPACE.match
    try:
        at = space(text, 0).end()
        while text[at] in "{,":
            key, at = json.decoder.scanstring(text, space(text, at + 1).end() + 1)
            at = space(text, space(text, at).end() + 1).end()  # past the colon
            try:
                at = space(text, decoder.raw_decode(text, at)[1]).end()
            except RecursionError:
                return key
    except (ValueError, IndexError):
        pass
    return None


def check_params(data: dict[str, Any]) -> None:
    """A 400 naming the first parameter this server does not know, or refuses and the request sets
    (`params.PARAMS`: nothing is accepted and ignored)."""
    for name, value in data.items():
        if name not in PARAMS:
            raise RequestError(f"unknown parameter {name!r}", name, 400, "unknown_parameter")
        if PARAMS[name][0] == REFUSED and value is not None:
            message = f"{name!r} is not supported by this server: {PARAMS[name][1]}"
            raise RequestError(message, name, 400, "unsupported_parameter")


@dataclass
class McpServer:
    label: str
    url: str
    headers: dict[str, str]
    allowed: set[str] | None  # None: all tools
    approval: Any  # "always" | "never" | {"always": {...}, "never": {...}}
    description: str | None = None
    client_named: bool = False  # the request named server_url: the MCP server policy applies
    address: str | None = None  # the checked IP to connect to (set once the policy admits the server)
    shown: frozenset[str] = frozenset()  # the tools the model is shown (set once the server is listed)

    def shows(self, tool: str) -> bool:
        """Whether the model is shown `tool`: listed by the server, not hidden, and in `allowed_tools`. Only
        these run, whether the model calls one or a client approves one."""
        return tool in self.shown

    def needs_approval(self, tool: str) -> bool:
        rule = self.approval
        if isinstance(rule, str):
            return rule != "never"
        if isinstance(rule, dict):
            never = set((rule.get("never") or {}).get("tool_names") or [])
            always = set((rule.get("always") or {}).get("tool_names") or [])
            if tool in never:
                return False
            return tool in always or not never
        return True


INCLUDABLE = (
    "code_interpreter_call.outputs",
    "web_search_call.action.sources",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "web_search_call.results",
    "file_search_call.results",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
)
INCLUDE_SUPPORTED = {
    "code_interpreter_call.outputs",
    "web_search_call.action.sources",
    "web_search_call.results",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "file_search_call.results",
}


def check_include(include: list[str] | None) -> set[str]:
    """The `include` values as a set; unknown values are a 400 (as OpenAI answers), unsupported ones too."""
    for i, value in enumerate(include or []):
        if value not in INCLUDABLE:
            supported = ", ".join(f"'{v}'" for v in INCLUDABLE)
            raise RequestError(
                f"Invalid value: '{value}'. Supported values are: {supported}.", f"include[{i}]", 400, "invalid_value"
            )
        if value not in INCLUDE_SUPPORTED:
            supported = ", ".join(sorted(INCLUDE_SUPPORTED))
            message = f"include value '{value}' is not supported by this server (supported: {supported})"
            raise RequestError(message, f"include[{i}]", 400, "unsupported_value")
    return set(include or [])


@dataclass(frozen=True)
class AnswerFormat:
    """`text.format` json_schema / json_object: the constraint the worker's structured decoding puts on the
    final answer, as vLLM takes it on each path."""

    structured: dict[str, Any]  # `structured_outputs` on /v1/completions (Harmony)
    response_format: dict[str, Any]  # `response_format` on /v1/chat/completions (the chat path)


def answer_format(text: TextConfig | None) -> AnswerFormat | None:
    """The request's answer format as a constraint; None for plain text. A malformed format is a 400."""
    fmt = text.format if text is not None else {"type": "text"}
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return AnswerFormat({"json_object": True}, {"type": "json_object"})
    if kind != "json_schema":
        raise RequestError(f"unknown text.format type {kind!r} (text, json_schema or json_object)", "text.format.type")
    schema, name = fmt.get("schema"), fmt.get("name")
    if not isinstance(schema, dict):
        raise RequestError("text.format json_schema needs a schema object", "text.format.schema")
    if not isinstance(name, str) or not name:
        raise RequestError("text.format json_schema needs a name", "text.format.name")
    described = {"name": name, "schema": schema, "strict": bool(fmt.get("strict"))}
    return AnswerFormat({"json": schema}, {"type": "json_schema", "json_schema": described})


@dataclass(frozen=True)
class Requirement:
    """What `tool_choice` demands of the model's first addressed message: a recipient prefix, and the
    header text to prefill (`<|channel|>... to=...`) when the model heads elsewhere."""

    recipient: str  # "" = any tool; "functions.x"; "browser."; "weather.get_forecast"
    prefill: str
    exact: bool = False

    def met_by(self, recipient: str | None) -> bool:
        name = (recipient or "").split(" ")[0]
        if not name or name == "assistant":
            return False
        return name == self.recipient if self.exact else name.startswith(self.recipient)


@dataclass
class Toolset:
    """What the model may address in this request."""

    builtins: dict[str, dict[str, str]] = field(default_factory=dict)  # namespace -> forwarded headers
    shell_for_container: bool = False
    mcp: dict[str, McpServer] = field(default_factory=dict)
    functions: list[dict[str, Any]] = field(default_factory=list)
    custom: dict[str, dict[str, Any]] = field(default_factory=dict)  # `custom` tools by name (`kinds/custom.py`)
    # client-run tools the model is shown as one function each (`tool_search`, `apply_patch`), by name
    shown: dict[str, dict[str, Any]] = field(default_factory=dict)
    local_shell: str | None = None  # a client-run shell: the item type its calls come out as
    # `namespace` tools (and a local shell's `container`): name -> (description, functions), addressed `NAME.fn`
    namespaces: dict[str, tuple[str, list[dict[str, Any]]]] = field(default_factory=dict)
    required: Requirement | None = None  # from tool_choice: required, or a named tool
    # namespace -> a container the request names for it, and where: code_interpreter's `container` (an id, or
    # `auto` with file_ids) for python, shell's `container_reference` for container; the service resolves each
    # to a `Workspace` once the caller is known (`workspace.py`)
    containers: dict[str, tuple[str, str | dict[str, Any]]] = field(default_factory=dict)
    # the file_search tool's search options and where it stands (`kinds/file_search.py`); its
    # `vector_store_ids` are checked to be the caller's once the caller is known (`responses/prepare.py`)
    file_search: dict[str, Any] | None = None
