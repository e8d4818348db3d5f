"""The `POST /v1/responses` request body, validated at the edge, and the tools it enables."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

BUILTIN_TYPES = {"web_search_preview": "browser", "web_search": "browser", "code_interpreter": "python"}


class RequestError(ValueError):
    """The caller's request is invalid: HTTP 400 with this message."""

    etype = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code
        self.headers: dict[str, str] = {}


def error_body(message: str, etype: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape, the body of every 4xx/5xx the orchestrator answers."""
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """`error_body`'s shape, as the OpenAPI document declares it for every 4xx/5xx."""

    error: ErrorDetail


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

    def sampling(self) -> dict[str, float]:
        """The sampling values sent to the worker (and echoed: the values actually used)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
        }

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is not None and (len(v) > 16 or any(len(k) > 64 or len(x) > 512 for k, x in v.items())):
            raise ValueError("metadata holds at most 16 keys of 64 characters with values of 512")
        return v


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
    "code_interpreter_call.outputs", "web_search_call.action.sources", "reasoning.encrypted_content",
    "message.output_text.logprobs", "web_search_call.results", "file_search_call.results",
    "message.input_image.image_url", "computer_call_output.output.image_url",
)  # fmt: skip
INCLUDE_SUPPORTED = {"code_interpreter_call.outputs", "web_search_call.action.sources", "reasoning.encrypted_content",
                     "message.output_text.logprobs"}  # fmt: skip


def check_include(include: list[str] | None) -> set[str]:
    """The `include` values as a set; unknown values are a 400 (as OpenAI answers), unsupported ones too."""
    for i, value in enumerate(include or []):
        if value not in INCLUDABLE:
            supported = ", ".join(f"'{v}'" for v in INCLUDABLE)
            raise RequestError(f"Invalid value: '{value}'. Supported values are: {supported}.", f"include[{i}]",
                               400, "invalid_value")  # fmt: skip
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
    # `namespace` tools: name -> (description, functions); the model addresses them as `NAME.fn`
    namespaces: dict[str, tuple[str, list[dict[str, Any]]]] = field(default_factory=dict)
    required: Requirement | None = None  # from tool_choice: required, or a named tool


def _tool_names(value: Any) -> set[str] | None:
    if value is None:
        return None
    if isinstance(value, list):
        return set(value)
    if isinstance(value, dict):
        return set(value.get("tool_names") or [])
    raise RequestError("allowed_tools must be a list of names or {tool_names: [...]}", "tools")


# Headers a client may not set on an MCP tool: the orchestrator's session id, and what HTTP itself owns.
RESERVED_HEADERS = frozenset(
    "x-session-id mcp-session-id host content-length transfer-encoding connection upgrade te trailer keep-alive"
    " proxy-authorization".split()
)


def _client_headers(tool: dict[str, Any], i: int) -> dict[str, str]:
    """An MCP tool's `headers`, plus `authorization` as a bearer token; reserved names are a 400."""
    raw = tool.get("headers") or {}
    if not isinstance(raw, dict):
        raise RequestError("mcp headers must be an object of strings", f"tools[{i}].headers")
    headers = {str(k): str(v) for k, v in raw.items()}
    if reserved := sorted(k for k in headers if k.lower() in RESERVED_HEADERS):
        raise RequestError(f"mcp headers may not set {', '.join(reserved)}", f"tools[{i}].headers")
    token = tool.get("authorization")
    if token is not None:
        if not isinstance(token, str) or not token:
            raise RequestError("mcp authorization must be a non-empty string", f"tools[{i}].authorization")
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {token}"
    return headers


CONTEXT_SIZES = ("low", "medium", "high")


def browser_headers(tool: dict[str, Any], where: str) -> dict[str, str]:
    """A web_search tool's options as the browser's x-browser-* request headers (DESIGN: browser options)."""
    if tool.get("type") not in ("web_search", "web_search_preview"):
        return {}
    out: dict[str, str] = {}
    domains = (tool.get("filters") or {}).get("allowed_domains") if isinstance(tool.get("filters"), dict) else None
    if domains is not None:
        if not isinstance(domains, list) or not all(isinstance(d, str) and d and "," not in d for d in domains):
            raise RequestError("filters.allowed_domains must be a list of domain names", f"{where}.filters")
        if domains:
            out["x-browser-allowed-domains"] = ",".join(domains)
    if tool.get("external_web_access") is False:
        out["x-browser-external-access"] = "off"
    if (size := tool.get("search_context_size")) is not None:
        if size not in CONTEXT_SIZES:
            raise RequestError("search_context_size must be low, medium or high", f"{where}.search_context_size")
        out["x-browser-context-size"] = size
    if (location := tool.get("user_location")) is not None:
        if not isinstance(location, dict):
            raise RequestError("user_location must be an object", f"{where}.user_location")
        out["x-browser-user-location"] = json.dumps(location, separators=(",", ":"))
    return out


def toolset(tools: list[dict[str, Any]], tool_choice: Any, gateway_url: Any) -> Toolset:
    """Sort the request's tools into built-in namespaces, MCP servers and functions."""
    out = Toolset()
    if tool_choice == "none":
        return out
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind in BUILTIN_TYPES:
            out.builtins.setdefault(BUILTIN_TYPES[kind], {}).update(browser_headers(tool, f"tools[{i}]"))
        elif kind == "shell":
            env = (tool.get("environment") or {}).get("type") if isinstance(tool.get("environment"), dict) else None
            if env not in (None, "container_auto"):
                message = f"shell environment {env!r} is not supported: commands run in the container tool"
                raise RequestError(message + " (environment container_auto)", f"tools[{i}].environment")
            out.shell_for_container = True  # container.exec calls come out as shell_call items
            out.builtins.setdefault("container", {})
        elif kind == "function":
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise RequestError("function tools need a name", f"tools[{i}].name")
            out.functions.append(tool)
        elif kind == "namespace":
            name, described = _namespace(tool, f"tools[{i}]")
            out.namespaces[name] = described
        elif kind == "mcp":
            label = tool.get("server_label")
            if not isinstance(label, str) or not label.isidentifier():
                raise RequestError("mcp tools need a server_label that is an identifier", f"tools[{i}].server_label")
            headers = _client_headers(tool, i)
            if label in ("browser", "python", "container"):
                out.builtins[label] = headers
                continue
            url = tool.get("server_url") or gateway_url(label)
            if not url:
                raise RequestError(f"mcp server {label!r} needs a server_url", f"tools[{i}].server_url")
            allowed = _tool_names(tool.get("allowed_tools"))
            approval = tool.get("require_approval", "always")
            out.mcp[label] = McpServer(label, url, headers, allowed, approval, tool.get("server_description"),
                                       client_named=bool(tool.get("server_url")))  # fmt: skip
        else:
            raise RequestError(f"unsupported tool type {kind!r}", f"tools[{i}].type")
    out.required = _requirement(tool_choice, out)
    return out


TAKEN_NAMESPACES = frozenset({"functions", "browser", "python", "container", "assistant", "user", "system"})


def _namespace(tool: dict[str, Any], where: str) -> tuple[str, tuple[str, list[dict[str, Any]]]]:
    """A `namespace` tool: client functions grouped under a name the model addresses as `NAME.fn`."""
    name, inner = tool.get("name"), tool.get("tools")
    if not isinstance(name, str) or not name.isidentifier() or name in TAKEN_NAMESPACES:
        raise RequestError(
            "a namespace tool needs a name that is an identifier and not a built-in one", f"{where}.name"
        )
    if not isinstance(inner, list):
        raise RequestError("a namespace tool needs a list of tools", f"{where}.tools")
    for j, fn in enumerate(inner):
        if not isinstance(fn, dict) or fn.get("type") != "function":
            kind = fn.get("type") if isinstance(fn, dict) else None
            message = f"namespace tools of type {kind!r} are not supported (only function)"
            raise RequestError(message, f"{where}.tools[{j}].type")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError("function tools need a name", f"{where}.tools[{j}].name")
    return name, (str(tool.get("description") or ""), inner)


def _requirement(choice: Any, tools: Toolset) -> Requirement | None:
    """`tool_choice` as a Requirement; a choice naming a tool the request does not enable is a 400."""
    if choice == "auto":
        return None
    if choice == "required":
        if not (tools.builtins or tools.mcp or tools.functions or tools.namespaces):
            raise RequestError("tool_choice 'required' needs at least one tool in tools", "tool_choice")
        channel = "commentary" if tools.functions or tools.mcp or tools.namespaces else "analysis"
        return Requirement("", f"<|channel|>{channel} to=")
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "function":
        name = choice.get("name")
        if name not in {f["name"] for f in tools.functions}:
            raise RequestError(f"tool_choice names function {name!r}, which is not in tools", "tool_choice")
        return Requirement(f"functions.{name}", f"<|channel|>commentary to=functions.{name}", exact=True)
    if kind == "mcp":
        label, name = choice.get("server_label"), choice.get("name")
        if label not in tools.mcp and label not in tools.builtins:
            raise RequestError(f"tool_choice names MCP server {label!r}, which is not in tools", "tool_choice")
        target = f"{label}.{name}" if name else f"{label}."
        return Requirement(target, f"<|channel|>commentary to={target}", exact=bool(name))
    if kind == "code_interpreter" and "python" in tools.builtins:
        return Requirement("python", "<|channel|>analysis to=python", exact=True)
    if kind in ("web_search_preview", "web_search") and "browser" in tools.builtins:
        return Requirement("browser.", "<|channel|>analysis to=browser.")
    raise RequestError(f"unsupported tool_choice {choice!r} (auto, none, required, or a function, mcp, "
                       "code_interpreter or web_search_preview tool of this request)", "tool_choice")  # fmt: skip
