"""One response's run state, split by owner: the limits and usage (the loop), the per-turn state (the turn
models), the tool-call accounting and tool state (`toolcalls` and `kinds/`), and the response body and
events (`ResponseBuilder`, written by the item streams of `kinds/`).

Only data and the TurnModel protocol live here, so every module that reads or writes a run imports this
one and none of them imports another to reach the run (no `turns` <-> `toolcalls` cycle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.callfeed import CallFeed
from orchestrator.request.schema import AnswerFormat, Requirement, ResponsesRequest, Toolset, answer_format
from orchestrator.responses.events import ResponseBuilder, usage
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import Endpoints, ToolSessions
from orchestrator.worker.client import Generate
from orchestrator.workspace import Workspace

JSON_RETRIES = 2  # function calls with invalid JSON arguments sent back to the model per response


@dataclass
class Limits:
    max_output_tokens: int
    max_tool_calls: int
    max_turns: int

    @classmethod
    def for_request(cls, req: ResponsesRequest, settings: OrchestratorSettings) -> Limits:
        return cls(
            req.max_output_tokens or settings.max_output_tokens,
            settings.max_tool_calls if req.max_tool_calls is None else req.max_tool_calls,
            max_turns=(req.max_tool_calls or settings.max_tool_calls) + 8,
        )


@dataclass
class Usage:
    input: int = 0
    output: int = 0
    cached: int = 0
    reasoning: int = 0
    tool_output: int = 0
    last_prompt: int = 0
    last_output: int = 0

    def as_dict(self) -> dict[str, Any]:
        return usage(
            input_tokens=self.input,
            output_tokens=self.output,
            cached=self.cached,
            reasoning=self.reasoning,
            tool_output=self.tool_output,
        )

    def account(self, prompt_tokens: int, generated: int) -> None:
        """One generation's tokens; the prompt's growth beyond the last prompt and output is tool output."""
        if self.last_prompt:
            self.tool_output += max(0, prompt_tokens - self.last_prompt - self.last_output)
        self.input += prompt_tokens
        self.output += generated
        self.last_prompt, self.last_output = prompt_tokens, generated


@dataclass
class ToolState:
    """Tool-call accounting and what the tools left for later turns and responses (owned by `toolcalls`
    and the kinds; `service` stores calls, pending and pages, and the results by item id)."""

    count: int = 0  # calls the model wrote in this response, admitted or not (`admit`)
    admitted: bool = True  # whether the call now being written is within max_tool_calls
    calls: dict[str, str] = field(default_factory=dict)  # function call_id -> name
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # approval id -> call
    answered: dict[str, dict[str, Any]] = field(default_factory=dict)  # approvals asked and answered in the input
    approvals: dict[str, bool] = field(default_factory=dict)  # mcp_approval_response decisions
    pages: dict[int, dict[str, Any]] = field(default_factory=dict)  # browser cursor -> web_search.browser_page
    results: dict[str, str] = field(default_factory=dict)  # output item id -> the tool's text
    sources: dict[str, dict[str, str]] = field(default_factory=dict)  # file_search marker "M:I" -> file (this response)
    log: list[tuple[str, str]] = field(default_factory=list)  # (namespace, outcome) per call, for metrics

    def admit(self, limits: Limits) -> bool:
        """Count a call the model started writing; True while it is within the response's `max_tool_calls`."""
        self.count += 1
        self.admitted = self.count <= limits.max_tool_calls
        return self.admitted


@dataclass(frozen=True)
class Constraint:
    """A generation under the worker's structured decoding: the header it continues, and the constraint
    (vLLM `structured_outputs`) on what follows: an answer format, or a custom tool's grammar."""

    prefill: str
    structured: dict[str, Any]


@dataclass
class TurnState:
    """What the turn models carry from one generation to the next."""

    renderer: h.Renderer = field(default_factory=h.Renderer)
    required: Requirement | None = None  # tool_choice not yet satisfied in this response
    forced: bool = False  # the header prefill was used: a second miss fails the response
    last_token: int = 0
    json_retries: int = JSON_RETRIES
    answer_format: AnswerFormat | None = None  # text.format json_schema / json_object
    constraining: Constraint | None = None  # the next generation: its prefilled header and its constraint


@dataclass
class Call:
    """A tool call the model wrote: its message, the item streamed while it was written (if any), whether
    it was within `max_tool_calls` (a call past it has no item and is never run; the model is told to answer),
    and, once `toolcalls.sort` classified it, its kind (None: no tool of the request), namespace and function."""

    msg: Message
    stream: Any = None  # kinds.Stream
    admitted: bool = True
    kind: Any = None  # kinds.Kind
    ns: str = ""
    fn: str = ""


@dataclass
class Turn:
    """What one generation asked for: "call" (with the calls), "return" (an answer, or the end of the
    stream), "length", "force" or "retry" (generate again)."""

    outcome: str
    calls: list[Call] = field(default_factory=list)


class TurnModel(Protocol):
    """The model-facing part of a turn: render the conversation for the worker, generate, and parse the
    output into items, events and messages. Harmony (token ids, `/v1/completions`) and chat (messages,
    `/v1/chat/completions`, vLLM's own template and parsers) implement it; the loop in `turns` is shared."""

    async def turn(self, r: Run, budget: int) -> Turn: ...

    async def count(self, r: Run) -> int:
        """The tokens of the prompt the next turn would send (`POST /v1/responses/input_tokens`)."""
        ...

    async def aside(self, r: Run, messages: list[Message], budget: int) -> str:
        """A generation outside the response's items (a summary to compact with, a warm-up): its text."""
        ...


class Checkpoint(Protocol):
    """Where a background response's run is kept as it goes, so another replica can go on with it when this
    one stops (`checkpoint.Checkpoints`): saved at each turn's start and around each tool call."""

    async def save(self, r: Run, calling: Call | None = None) -> None: ...


@dataclass
class Run:
    """Everything one response's loop needs."""

    builder: ResponseBuilder
    messages: list[Message]  # full conversation: system, developer, history, new input, then this response's
    toolset: Toolset
    endpoints: Endpoints
    sessions: ToolSessions
    generate: Generate
    limits: Limits
    conversation: str
    sampling: dict[str, float] = field(default_factory=dict)  # temperature, top_p, penalties (the values used)
    effort: str | None = None  # reasoning.effort as asked: in Harmony's system message; chat path: `reasoning_effort`
    new_input: list[Message] = field(default_factory=list)  # appended after pending approvals are answered
    # namespace -> the container its calls work in (`workspace.py`); absent: the conversation's own sandbox
    workspaces: dict[str, Workspace] = field(default_factory=dict)
    public_url: str = ""  # the orchestrator as clients reach it: links to container file content
    include: set[str] = field(default_factory=set)
    logprobs: int | None = None  # top_logprobs to report per output_text token; None: logprobs not included
    model: TurnModel | None = None  # None: Harmony (`turns.HARMONY`)
    usage: Usage = field(default_factory=Usage)
    tools: ToolState = field(default_factory=ToolState)
    turn: TurnState = field(default_factory=TurnState)
    compact_threshold: int | None = None  # context_management: compact before a turn whose prompt is larger
    context_tokens: int | None = None  # truncation auto: drop the oldest items before a turn whose prompt is larger
    affinity: tuple[str, ...] = ()  # the keys that keep it on the worker holding its prefix (`worker/affinity.py`)
    warm_only: bool = False  # WebSocket `generate: false`: prefill the worker's cache, make no output
    compact_only: bool = False  # a `compaction_trigger` input item: the output is one compaction item
    checkpoint: Checkpoint | None = None  # a background response's: kept so another replica can adopt it
    feed: CallFeed | None = None  # the replica's feed of finished tool calls (the console's Live page)

    @classmethod
    def for_request(
        cls,
        req: ResponsesRequest,
        settings: OrchestratorSettings,
        builder: ResponseBuilder,
        *,
        messages: list[Message],
        new_input: list[Message],
        toolset: Toolset,
        include: set[str],
        model: TurnModel | None,
        sessions: ToolSessions,
        endpoints: Endpoints,
        generate: Generate,
        tools: ToolState,
        compact_only: bool,
    ) -> Run:
        """The run of `req`: what the request says itself (limits, sampling, effort, logprobs, tool_choice, the
        answer format, compaction and truncation) is read here, once; the rest is prepared first (`prepare`):
        the messages, the tools shown, the turn model, the tool sessions (their id is the run's conversation)."""
        return cls(
            builder,
            messages,
            toolset,
            endpoints,
            sessions,
            generate,
            Limits.for_request(req, settings),
            sessions.session_id,
            req.sampling(),
            effort=req.reasoning.effort if req.reasoning else None,
            new_input=new_input,
            include=include,
            model=model,
            tools=tools,
            turn=TurnState(required=toolset.required, answer_format=answer_format(req.text)),
            logprobs=(req.top_logprobs or 0) if "message.output_text.logprobs" in include else None,
            compact_threshold=req.compact_threshold,
            context_tokens=settings.context_tokens if req.truncation == "auto" else None,
            compact_only=compact_only,
        )
