"""The `POST /v1/responses` request body, validated at the edge, and the tools it enables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

BUILTIN_TYPES = {"web_search_preview": "browser", "web_search": "browser", "code_interpreter": "python"}


class RequestError(ValueError):
    """The caller's request is invalid: HTTP 400 with this message."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


class Reasoning(BaseModel):
    model_config = ConfigDict(extra="allow")
    effort: Literal["minimal", "low", "medium", "high"] | None = None
    summary: str | None = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

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
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool = True
    user: str | None = None

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


@dataclass
class Toolset:
    """What the model may address in this request."""

    builtins: dict[str, dict[str, str]] = field(default_factory=dict)  # namespace -> forwarded headers
    shell_for_container: bool = False
    mcp: dict[str, McpServer] = field(default_factory=dict)
    functions: list[dict[str, Any]] = field(default_factory=list)


def _tool_names(value: Any) -> set[str] | None:
    if value is None:
        return None
    if isinstance(value, list):
        return set(value)
    if isinstance(value, dict):
        return set(value.get("tool_names") or [])
    raise RequestError("allowed_tools must be a list of names or {tool_names: [...]}", "tools")


def toolset(tools: list[dict[str, Any]], tool_choice: Any, gateway_url: Any) -> Toolset:
    """Sort the request's tools into built-in namespaces, MCP servers and functions."""
    out = Toolset()
    if tool_choice == "none":
        return out
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind in BUILTIN_TYPES:
            out.builtins.setdefault(BUILTIN_TYPES[kind], {})
        elif kind == "shell":
            out.shell_for_container = True
        elif kind == "function":
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                raise RequestError("function tools need a name", f"tools[{i}].name")
            out.functions.append(tool)
        elif kind == "mcp":
            label = tool.get("server_label")
            if not isinstance(label, str) or not label.isidentifier():
                raise RequestError("mcp tools need a server_label that is an identifier", f"tools[{i}].server_label")
            headers = {str(k): str(v) for k, v in (tool.get("headers") or {}).items()}
            if label in ("browser", "python", "container"):
                out.builtins[label] = headers
                continue
            url = tool.get("server_url") or gateway_url(label)
            if not url:
                raise RequestError(f"mcp server {label!r} needs a server_url", f"tools[{i}].server_url")
            allowed = _tool_names(tool.get("allowed_tools"))
            approval = tool.get("require_approval", "always")
            out.mcp[label] = McpServer(label, url, headers, allowed, approval, tool.get("server_description"))
        else:
            raise RequestError(f"unsupported tool type {kind!r}", f"tools[{i}].type")
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        out.functions = [f for f in out.functions if f["name"] == tool_choice.get("name")]
    return out
