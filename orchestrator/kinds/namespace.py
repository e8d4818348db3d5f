"""`namespace` tools: client functions grouped under a name. The model is shown the group as one Harmony
namespace and addresses `NS.fn`; the call is a `function_call` item carrying `namespace`, run by the client
(`FunctionStream`; its output comes back as a `function_call_output`, echoed by `FunctionKind`)."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import RequestError
from orchestrator.kinds.base import DESCRIBED, Field, Kind, Parsing, Stream
from orchestrator.kinds.function import FunctionKind, FunctionStream
from orchestrator.request.params import HONOURED
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.run import Run

TAKEN = frozenset({"functions", "assistant", "user", "system", "developer"})


class NamespaceKind(Kind):
    tool_types = ("namespace",)
    executed = False
    fields = {
        "name": Field(HONOURED, "the namespace the model addresses (`NS.fn`)"),
        "description": DESCRIBED,
        "tools": Field(HONOURED, "function tools only, each field as a `function` tool's", inner=FunctionKind.fields),
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        name, inner = tool.get("name"), tool.get("tools")
        if not isinstance(name, str) or not name.isidentifier() or name in TAKEN | set(ctx.builtin_namespaces):
            raise RequestError(
                "a namespace tool needs a name that is an identifier and not a built-in one", f"{where}.name"
            )
        if not isinstance(inner, list):
            raise RequestError("a namespace tool needs a list of tools", f"{where}.tools")
        for j, fn in enumerate(inner):
            kind = fn.get("type") if isinstance(fn, dict) else None
            if kind != "function":
                message = f"namespace tools of type {kind!r} are not supported (only function)"
                raise RequestError(message, f"{where}.tools[{j}].type")
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise RequestError("function tools need a name", f"{where}.tools[{j}].name")
        out.namespaces[name] = (str(tool.get("description") or ""), inner)

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        """`{"type": "namespace", "name": NS}`: any function of that namespace."""
        name = choice.get("name")
        if name not in tools.namespaces:
            raise RequestError(f"tool_choice names namespace {name!r}, which is not in tools", "tool_choice")
        return Requirement(f"{name}.", f"<|channel|>commentary to={name}.")

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns in toolset.namespaces

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return FunctionStream(r, fn, ns)
