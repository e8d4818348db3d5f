"""What every kind module shares: the Kind and Stream interfaces, the one sequence a tool call runs
(`Kind.call`), a tool call's JSON arguments, calling a tool server, and answering the model."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.request.params import HONOURED, REFUSED
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import Item
from orchestrator.responses.run import Run
from orchestrator.tools import ToolOutcome
from orchestrator.worker.client import TokenLogprob
from toolkit import strictjson


@dataclass(frozen=True)
class Field:
    """What one field of a request tool does here, as `params.PARAMS` says for the create parameters: a
    REFUSED field is a 400 unless its value is one of `accepts` (the values that ask for nothing)."""

    status: str  # params.HONOURED, NO_OP or REFUSED
    note: str
    accepts: tuple[Any, ...] = (None, False)
    inner: dict[str, Field] | None = None  # a list of tools (a namespace's): each entry's fields


DIRECT_ONLY = Field(REFUSED, "only direct calls by the model (no programmatic callers)", (None, ["direct"]))
NOT_DEFERRED = Field(REFUSED, "no deferred tools here (tool_search runs on the client)")
DESCRIBED = Field(HONOURED, "shown to the model")


class Stream:
    """An output item while the model writes it: opened at the message header, fed the text as it arrives,
    closed when the message is complete (or cut short: `complete=False`)."""

    delta_event: ClassVar[str | None] = None  # the event each piece of text is sent as
    shows_arguments: ClassVar[bool] = False  # chat path: the item shows a call's arguments as they arrive

    def __init__(self, r: Run, item: Item) -> None:
        self.r, self.item = r, item

    @property
    def in_progress(self) -> bool:
        return self.item.status == "in_progress"

    def delta(self, text: str, lp: TokenLogprob | None = None) -> None:
        if text and self.delta_event:
            self.item.event(self.delta_event, delta=text)

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        raise NotImplementedError

    def abandon(self) -> None:
        """The call ended without its kind finishing the item (no kind claimed it): the item failed."""
        if self.in_progress:
            self.item.finish("failed")


class ToolStream(Stream):
    """A built-in call's item streamed while the call is written; the kind's `call` finishes it once the
    tool has answered, unless the call was cut short (then it fails here)."""

    done_event: ClassVar[str]
    field: ClassVar[str]  # the item field (and done-event field) that holds what the model wrote

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        text = h.text_of(msg) if msg is not None else ""
        self.item.event(self.done_event, **{self.field: text})
        self.item.update(**{self.field: text})
        if not complete:
            self.item.finish("failed")


@dataclass
class EchoContext:
    """What echoing client-kept input items needs and finds: function call ids -> names (filled in as they
    come), the kept tool text of earlier items by item id, and the approval decisions the input carries."""

    calls: dict[str, str] = field(default_factory=dict)
    results: dict[str, str] = field(default_factory=dict)
    approvals: dict[str, bool] = field(default_factory=dict)  # mcp_approval_request id -> approved
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)  # approval requests the input carries
    answered: dict[str, dict[str, Any]] = field(default_factory=dict)  # ... and those the input answers too
    unsigned: dict[str, str] = field(default_factory=dict)  # approval requests this fleet did not issue -> where


@dataclass(frozen=True)
class Parsing:
    """What parsing a request tool needs besides the tool: the gateway's URL for a namespace (None: no
    gateway), and the built-in namespaces (derived from the kinds table)."""

    gateway_url: Callable[[str], str | None]
    builtin_namespaces: tuple[str, ...]


class Kind:
    """One tool type, end to end: the request `tools[]` entries it accepts and `tool_choice` naming it, the
    namespaces it serves (and what the model is shown when their server cannot be listed), how its output
    item opens and streams, how its call runs and finishes it, and how an item of it sent back as input
    becomes Harmony messages again (the chat path renders those)."""

    tool_types: ClassVar[tuple[str, ...]] = ()  # the request `tools[].type` values `parse` reads
    echoes: ClassVar[tuple[str, ...]] = ()  # the input item types `echo` reads
    reads_kept_text: ClassVar[bool] = False  # `echo` wants the tool text kept (by item id) for its items
    executed: ClassVar[bool] = True  # False: the client runs the call (functions)
    # functions with no effect to repeat: a call of one in flight when its replica stopped runs again there
    rerun_safe: ClassVar[frozenset[str]] = frozenset()
    json_arguments: ClassVar[bool] = True  # the call's text is a JSON object (False: free text, custom tools)
    namespaces: ClassVar[tuple[str, ...]] = ()  # built-in namespaces this kind serves (system message, chat)
    # its namespaces' tool servers hold sandboxes that a platform container's files move into (`workspace.py`)
    sandboxed: ClassVar[bool] = False
    listed: ClassVar[bool] = True  # False: the model is shown `fallback`, never its server's tool listing
    # the fields of its `tools[]` entries besides `type` (any other is a 400; README table from these)
    fields: ClassVar[dict[str, Field]] = {}

    # --- the request side ----------------------------------------------------------------------------

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        """Add one request tool of a type in `tool_types` to `out`; a bad one is a 400 naming `where`."""
        raise NotImplementedError

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        """`tool_choice` naming one of `tool_types`; None: this request does not enable it (a 400)."""
        return None

    def echo_tool(self, tool: dict[str, Any]) -> dict[str, Any]:
        """The request tool as the response lists it, with the defaults OpenAI fills in."""
        return dict(tool)

    def fallback(self, ns: str) -> h.Namespace:
        """The namespace shown to the model (Harmony path) when its tool server cannot be listed."""
        raise NotImplementedError

    # --- the output side -----------------------------------------------------------------------------

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        """Whether a recipient `ns.fn` is a call of this kind in this request."""
        return False

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        """The item opened at the call's header; None: the item opens once the call is complete."""
        return None

    async def call(self, r: Run, msg: Message, ns: str, fn: str, stream: Stream | None) -> ToolOutcome | None:
        """Run the call and finish its items; None: the response stops here (an approval request).

        The one sequence of every tool kind: read the arguments, open the item (or take the one streamed
        while the call was written) in progress, invoke the tool unless the arguments were refused, then
        finish the item (status, `*.completed`, `output_item.done`). A kind fills in the steps."""
        args, err = self.arguments(r, msg, ns, fn)
        item = self.begin(r, msg, ns, fn, args, stream)
        if item is None:
            return None
        outcome = rejected(err) if err is not None else await self.run(r, ns, fn, args)
        self.end(r, item, fn, outcome)
        return outcome

    async def run(self, r: Run, ns: str, fn: str, args: dict[str, Any]) -> ToolOutcome:
        """Invoke the tool server's function; in a container's workspace (code_interpreter's or a shell's
        `container_reference`), its files are in /mnt/data before the call and what it writes is saved."""
        call = functools.partial(invoke, r, ns, self.function(fn), args)
        return await space.run(call) if (space := r.workspaces.get(ns)) is not None else await call()

    def arguments(self, r: Run, msg: Message, ns: str, fn: str) -> tuple[dict[str, Any], str | None]:
        """The tool's arguments from the call message, and the error the model reads instead of a run."""
        args, err = tool_args(h.text_of(msg))
        return args or {}, err

    def argument_error(self, text: str) -> str | None:
        """What is wrong with a client call's text, told to the model so it writes the call again (None: fine)."""
        return tool_args(text)[1]

    def function(self, fn: str) -> str:
        """The tool server's function the call invokes."""
        return fn

    def begin(self, r: Run, msg: Message, ns: str, fn: str, args: dict[str, Any], stream: Stream | None) -> Item | None:
        """The call's item, opened (or taken from `stream`) and in progress; None: the call is not run and
        the response stops here (it waits for the client's approval)."""
        raise NotImplementedError

    def end(self, r: Run, item: Item, fn: str, outcome: ToolOutcome) -> None:
        """Finish the item with the tool's outcome (`Item.finish`)."""
        raise NotImplementedError

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        raise NotImplementedError

    # --- the chat path (chat-template workers): the same calls as chat functions -----------------------

    def chat_functions(self, ns: h.Namespace) -> list[dict[str, Any]]:
        """The functions {name, description, parameters} a namespace is offered as (name "": the namespace
        itself is the function); by default the tools its server listed."""
        return list(ns.tools)

    def chat_arguments(self, msg: Message) -> str:
        """A call's Harmony message as the chat tool call's `arguments`."""
        return h.text_of(msg)

    def from_chat(self, recipient: str, arguments: str) -> tuple[Message, str | None]:
        """A chat tool call as the Harmony message the conversation keeps, and the error the model reads
        instead of a run (None: run it)."""
        return h.assistant(arguments, "commentary", recipient, "json"), None


def check_fields(fields: dict[str, Field], tool: dict[str, Any], where: str) -> None:
    """A 400 naming the first field of a request tool that its kind does not know, or refuses and the tool
    sets (nothing in a tool definition is accepted and ignored)."""
    for name, value in tool.items():
        if name == "type":
            continue
        rule = fields.get(name)
        if rule is None:
            message = f"unknown field {name!r} in a {tool.get('type')} tool"
            raise RequestError(message, f"{where}.{name}", 400, "unknown_parameter")
        if rule.status == REFUSED and value not in rule.accepts:
            message = f"{name!r} of a {tool.get('type')} tool is not supported by this server: {rule.note}"
            raise RequestError(message, f"{where}.{name}", 400, "unsupported_parameter")
        if rule.inner is not None and isinstance(value, list):
            for j, entry in enumerate(value):
                if isinstance(entry, dict):
                    check_fields(rule.inner, entry, f"{where}.{name}[{j}]")


def tool_args(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON object a tool call carries, or an error message the model can act on."""
    try:
        value = strictjson.loads(text or "{}")
    except strictjson.NotJson as exc:
        return None, f"Error: the tool arguments are not valid JSON ({exc}). Send one JSON object."
    except RecursionError:
        return None, "Error: the tool arguments nest too deep to read. Send one flat JSON object."
    if not isinstance(value, dict):
        return None, "Error: the tool arguments must be a JSON object."
    return value, None


def rejected(text: str) -> ToolOutcome:
    """A call refused before any tool server saw it."""
    return ToolOutcome(text, True, outcome="rejected")


async def invoke(r: Run, ns: str, fn: str, args: dict[str, Any]) -> ToolOutcome:
    """Call `ns.fn` on its server: a request's MCP server, or the fleet's tool server for the namespace."""
    if (server := r.toolset.mcp.get(ns)) is not None:  # at the address its listing was checked at
        return await r.sessions.call(
            server.url, fn, args, server.headers, address=server.address, client_named=server.client_named
        )
    url = r.endpoints.url_for(ns)
    if url is None:
        return ToolOutcome(f"Error: no tool server is configured for `{ns}`.", True, outcome="unavailable")
    return await r.sessions.call(url, fn, args, r.toolset.builtins.get(ns, {}))


def answer(r: Run, recipient: str, text: str, channel: str | None) -> None:
    """The tool's answer as the model reads it in the next turn's prompt."""
    r.messages.append(h.tool_result(recipient, text or "(no output)", channel))
