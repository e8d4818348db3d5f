"""The Harmony turn loop: generate, parse into output items and events, call tools, re-render, repeat.

Each turn renders the whole conversation again (analysis before the last final answer dropped, as
vLLM does), so a turn's prompt extends the previous turn's prompt plus its output and the worker's
prefix cache hits. A response ends at a final answer, a function call, an approval request, the
token budget, or a tool-call limit.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.events import ResponseBuilder, new_id, usage
from orchestrator.items import seal_reasoning
from orchestrator.schema import Requirement, Toolset
from orchestrator.toolcalls import ToolCaller, admit, cited, classify, open_code_item, open_mcp_item
from orchestrator.tools import Endpoints, ToolSessions
from orchestrator.worker.client import Generate, GenerateRequest, TokenLogprob


@dataclass
class Limits:
    max_output_tokens: int
    max_tool_calls: int
    max_turns: int


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
        return usage(input_tokens=self.input, output_tokens=self.output, cached=self.cached,
                     reasoning=self.reasoning, tool_output=self.tool_output)  # fmt: skip


JSON_RETRIES = 2  # function calls with invalid JSON arguments sent back to the model per response


@dataclass
class Call:
    """A tool call the model wrote: its message, the output item it streamed into (if any), and whether it
    was within `max_tool_calls` (a call past it has no item and is never run; the model is told to answer)."""

    msg: Message
    index: int | None = None
    admitted: bool = True


@dataclass
class Turn:
    """What one generation asked for: "call" (with the calls), "return" (an answer, or the end of the
    stream), "length", "force" or "retry" (generate again)."""

    outcome: str
    calls: list[Call] = field(default_factory=list)


class TurnModel(Protocol):
    """The model-facing part of a turn: render the conversation for the worker, generate, and parse the
    output into items, events and messages. Harmony (token ids, `/v1/completions`) and chat (messages,
    `/v1/chat/completions`, vLLM's own template and parsers) implement it; the loop above is shared."""

    async def turn(self, r: Run, budget: int) -> Turn: ...


class HarmonyTurns:
    """Harmony workers: the prompt rendered to token ids here, the sampled tokens parsed here."""

    async def turn(self, r: Run, budget: int) -> Turn:
        outcome = await _turn(r, budget)
        last = r.messages[-1] if r.messages else None
        if outcome == "call" and last is not None and last.author.role == h.Role.ASSISTANT and last.recipient:
            return Turn("call", [Call(last, r.open_tool_index, r.call_admitted)])
        return Turn("return" if outcome == "call" else outcome)


HARMONY = HarmonyTurns()


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
    temperature: float | None = None
    top_p: float | None = None
    calls: dict[str, str] = field(default_factory=dict)  # function call_id -> name
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # approval id -> call
    approvals: dict[str, bool] = field(default_factory=dict)  # mcp_approval_response decisions
    new_input: list[Message] = field(default_factory=list)  # appended after pending approvals are answered
    container_id: str = "auto"
    renderer: h.Renderer = field(default_factory=h.Renderer)
    open_tool_index: int | None = None  # a code/mcp item streamed while the call was being written
    pages: dict[int, dict[str, Any]] = field(default_factory=dict)  # browser cursor -> toolcalls.browser_page
    usage: Usage = field(default_factory=Usage)
    tool_calls: int = 0  # calls the model wrote in this response, admitted or not (`admit`)
    call_admitted: bool = True  # whether the call now being written is within max_tool_calls
    required: Requirement | None = None  # tool_choice not yet satisfied in this response
    forced: bool = False  # the header prefill was used: a second miss fails the response
    include: set[str] = field(default_factory=set)
    results: dict[str, str] = field(default_factory=dict)  # web_search_call id -> the tool's text
    tool_log: list[tuple[str, str]] = field(default_factory=list)  # (namespace, outcome) per call, for metrics
    logprobs: int | None = None  # top_logprobs to report per output_text token; None: logprobs not included
    last_token: int = 0
    model: TurnModel = HARMONY
    json_retries: int = JSON_RETRIES


class _Item:
    """The output item a Harmony message becomes, fed as its tokens arrive."""

    def __init__(self, run: Run, header: h.Header) -> None:
        self.run, self.header = run, header
        self.index: int | None = None
        self.kind = "hidden"
        self.logprobs: list[dict[str, Any]] = []  # output_text logprobs, when include asks for them
        self.pending: list[tuple[int, TokenLogprob]] = []  # tokens whose text has not shown yet (split UTF-8)
        b, recipient = run.builder, header.recipient
        if recipient is None or recipient == "assistant":
            if header.channel == "analysis":
                self.kind = "reasoning"
                self.index = b.add_item({"id": new_id("rs"), "type": "reasoning", "summary": [], "content": [],
                                         "status": "in_progress"})  # fmt: skip
                b.item_event(self.index, "response.content_part.added", content_index=0,
                             part={"type": "reasoning_text", "text": ""})  # fmt: skip
            else:
                self.kind = "message"
                self.index = b.add_item({"id": new_id("msg"), "type": "message", "role": "assistant",
                                         "status": "in_progress", "content": []})  # fmt: skip
                b.item_event(self.index, "response.content_part.added", content_index=0,
                             part={"type": "output_text", "text": "", "annotations": [], "logprobs": []})  # fmt: skip
            return
        if recipient.startswith("functions."):
            self.kind = "function_call"
            call_id = new_id("call")
            self.index = b.add_item({"id": new_id("fc"), "type": "function_call", "call_id": call_id,
                                     "name": recipient.removeprefix("functions."), "arguments": "",
                                     "status": "in_progress"})  # fmt: skip
        else:
            kind, ns, fn = classify(run, recipient)
            if kind == "python":
                self.kind, self.index = "code", open_code_item(run)
            elif kind == "mcp":
                self.kind, self.index = "mcp", open_mcp_item(run, ns, fn)
            run.open_tool_index = self.index  # browser items open once the call is complete (ToolCaller)

    def delta(self, text: str, lp: TokenLogprob | None = None) -> None:
        if lp is not None and self.kind == "message":
            self.pending.append((self.run.last_token, lp))
        if self.index is None or not text:
            return
        b = self.run.builder
        if self.kind == "message" and self.run.logprobs is not None:
            entries = [_logprob(t, x, self.run.logprobs) for t, x in self.pending]
            self.logprobs += entries
            self.pending = []
            b.item_event(self.index, "response.output_text.delta", content_index=0, delta=text,
                         logprobs=[_without_bytes(e) for e in entries])  # fmt: skip
        elif self.kind == "reasoning":
            b.item_event(self.index, "response.reasoning_text.delta", content_index=0, delta=text)
        elif self.kind == "message":
            b.item_event(self.index, "response.output_text.delta", content_index=0, delta=text, logprobs=[])
        elif self.kind == "function_call":
            b.item_event(self.index, "response.function_call_arguments.delta", delta=text)
        elif self.kind == "code":
            b.item_event(self.index, "response.code_interpreter_call_code.delta", delta=text)
        elif self.kind == "mcp":
            b.item_event(self.index, "response.mcp_call_arguments.delta", delta=text)

    def close(self, msg: Message | None, *, complete: bool = True, annotations: list[dict[str, Any]] | None = None):
        if self.index is None:
            return
        b, text = self.run.builder, h.text_of(msg) if msg is not None else ""
        item = b.output[self.index]
        status = "completed" if complete else "incomplete"
        if self.kind == "reasoning":
            b.item_event(self.index, "response.reasoning_text.done", content_index=0, text=text)
            part = {"type": "reasoning_text", "text": text}
            b.item_event(self.index, "response.content_part.done", content_index=0, part=part)
            item.update(content=[part], status=status)
            if "reasoning.encrypted_content" in self.run.include:
                item["encrypted_content"] = seal_reasoning(text)
        elif self.kind == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": self.logprobs}
            for i, ann in enumerate(annotations or []):
                part["annotations"].append(ann)
                b.item_event(self.index, "response.output_text.annotation.added", content_index=0,
                             annotation_index=i, annotation=ann)  # fmt: skip
            b.item_event(self.index, "response.output_text.done", content_index=0, text=text,
                         logprobs=[_without_bytes(e) for e in self.logprobs])  # fmt: skip
            b.item_event(self.index, "response.content_part.done", content_index=0, part=part)
            item.update(content=[part], status=status)
        elif self.kind == "function_call":
            b.item_event(self.index, "response.function_call_arguments.done", arguments=text, name=item["name"])
            if complete and self.run.json_retries > 0 and tool_args(text)[1] is not None:
                status = "incomplete"  # invalid JSON: the model is told and writes the call again (`run`)
            item.update(arguments=text, status=status)
            if status == "completed":
                self.run.calls[item["call_id"]] = item["name"]
        elif self.kind in ("code", "mcp"):
            if self.kind == "code":
                b.item_event(self.index, "response.code_interpreter_call_code.done", code=text)
                item["code"] = text
            else:
                b.item_event(self.index, "response.mcp_call_arguments.done", arguments=text)
                item["arguments"] = text
            if complete:
                return  # the ToolCaller finishes the item once the tool has answered
            item["status"] = "failed"
        b.done_item(self.index)


async def run(r: Run) -> None:
    """Drive turns until the response is finished; the caller handles cancellation and worker errors."""
    caller = ToolCaller(r)
    await caller.resume_approvals()
    r.messages.extend(r.new_input)
    while True:
        remaining = r.limits.max_output_tokens - r.usage.output
        if remaining <= 0:
            return r.builder.finish("incomplete", usage=r.usage.as_dict(), incomplete_reason="max_output_tokens")
        turn = await r.model.turn(r, remaining)
        if turn.outcome in ("force", "retry"):
            continue  # force: tool_choice wants a call and the header is prefilled; retry: generate again
        if turn.outcome == "length":
            return r.builder.finish("incomplete", usage=r.usage.as_dict(), incomplete_reason="max_output_tokens")
        builtin = [c for c in turn.calls if c.admitted and not (c.msg.recipient or "").startswith("functions.")]
        functions = [c.msg for c in turn.calls if c.admitted and (c.msg.recipient or "").startswith("functions.")]
        ignored = [c.msg for c in turn.calls if not c.admitted]
        if builtin or ignored:
            if r.tool_calls > r.limits.max_turns:
                return r.builder.finish("incomplete", usage=r.usage.as_dict(), incomplete_reason="max_messages")
            for msg in ignored:
                caller.refuse(msg)
            answered = True
            for call in builtin:
                r.open_tool_index = call.index
                answered = await caller.call(call.msg) and answered  # False: an approval request ends the response
            if answered and not functions:
                continue
        if not builtin and _retry_bad_arguments(r, functions):
            continue
        if r.required is not None:
            error = {
                "code": "server_error",
                "message": "tool_choice requires a tool call; the model answered without one even when prompted",
            }
            return r.builder.finish("failed", usage=r.usage.as_dict(), error=error)  # fmt: skip
        return r.builder.finish("completed", usage=r.usage.as_dict())


def _retry_bad_arguments(r: Run, functions: list[Message]) -> bool:
    """Function calls whose arguments are not JSON go back to the model as errors (a bounded number of
    times per response); their items were closed `incomplete` (`_Item.close`). True: generate again."""
    errors = [(m, err) for m in functions if (err := tool_args(h.text_of(m))[1]) is not None]
    if not errors or r.json_retries <= 0:
        return False
    r.json_retries -= 1
    for msg, err in errors:
        r.messages.append(h.tool_result(msg.recipient or "", err + " Write the call again.", msg.channel))
    return True


async def _turn(r: Run, budget: int) -> str:
    """One generation. Returns "call", "return" (or end of stream), or "length"."""
    parser = h.TurnParser()
    prefill = h.encoding().encode(r.required.prefill, allowed_special="all") if r.forced and r.required else []
    for token in prefill:  # the header the model must continue (tool_choice), as if it had sampled it
        parser.feed(token)
    prompt = r.renderer.render(r.messages) + prefill
    item: _Item | None = None
    prompt_tokens = generated = 0
    finish = None
    last_token = None
    req = GenerateRequest(prompt, budget, r.temperature, r.top_p, r.conversation, r.logprobs)
    try:
        async with contextlib.aclosing(r.generate(req)) as stream:
            async for chunk in stream:
                if chunk.prompt_tokens is not None:
                    prompt_tokens = chunk.prompt_tokens
                if chunk.cached_tokens is not None:
                    r.usage.cached += chunk.cached_tokens
                if chunk.finish_reason:
                    finish = chunk.finish_reason
                for i, token in enumerate(chunk.token_ids):
                    generated += 1
                    last_token = r.last_token = token
                    lp = chunk.logprobs[i] if chunk.logprobs and i < len(chunk.logprobs) else None
                    header, delta, msg = parser.feed(token)
                    if header is not None and r.required is not None and _misses(r, header):
                        r.forced = True
                        return "force"  # closing the stream aborts the generation on the worker
                    item = _feed(r, parser, item, header, delta, msg, lp)
    finally:
        _account(r, prompt_tokens or len(prompt), generated)
        if item is not None and item.index is not None and r.builder.output[item.index].get("status") == "in_progress":
            partial = parser.finish()
            if partial is not None and item.kind != "function_call":
                r.messages.append(partial)
            item.close(partial, complete=False)
    if last_token == h.CALL:
        return "call"
    if finish == "length" and last_token not in h.STOP_TOKENS:
        return "length"
    return "return"


def _misses(r: Run, header: h.Header) -> bool:
    """Whether a message header defies tool_choice; reasoning and preambles (no recipient) are fine."""
    assert r.required is not None
    if r.required.met_by(header.recipient):
        r.required = None
        return False
    if header.recipient is None and header.channel in ("analysis", "commentary"):
        return False
    return not r.forced


def _feed(r: Run, parser: h.TurnParser, item: _Item | None, header: h.Header | None, delta: str,
          msg: Message | None, lp: TokenLogprob | None = None) -> _Item | None:  # fmt: skip
    """One sampled token's effect on the output items; returns the item now open."""
    if parser.header is not None and parser.header.channel in ("analysis", "commentary") and not header:
        r.usage.reasoning += 1
    if header is not None and header.recipient not in (None, "assistant"):
        r.call_admitted = admit(r)
        item = _Item(r, header) if r.call_admitted else None  # past max_tool_calls: no item, no events
    elif header is not None:
        item = _Item(r, header)
    elif item is not None and (delta or lp is not None) and msg is None:
        item.delta(delta, lp)
    if msg is not None:
        r.messages.append(msg)
        if item is not None:
            item.close(msg, annotations=_annotations(r, msg) if item.kind == "message" else None)
        item = None
    return item


def _logprob(token: int, lp: TokenLogprob, top_n: int) -> dict[str, Any]:
    """An output_text logprob: the sampled token (decoded here, from its id) and the worker's `top_n` best."""
    text = h.encoding().decode([token])
    top = [{"token": t, "bytes": list(t.encode()), "logprob": v} for t, v in lp.top[:top_n]]
    return {"token": text, "bytes": list(text.encode()), "logprob": lp.logprob, "top_logprobs": top}


def _without_bytes(entry: dict[str, Any]) -> dict[str, Any]:
    """The same logprob as the delta/done events carry it (no bytes)."""
    top = [{"token": t["token"], "logprob": t["logprob"]} for t in entry["top_logprobs"]]
    return {"token": entry["token"], "logprob": entry["logprob"], "top_logprobs": top}


def _account(r: Run, prompt_tokens: int, generated: int) -> None:
    u = r.usage
    if u.last_prompt:
        u.tool_output += max(0, prompt_tokens - u.last_prompt - u.last_output)
    u.input += prompt_tokens
    u.output += generated
    u.last_prompt, u.last_output = prompt_tokens, generated


def _annotations(r: Run, msg: Message) -> list[dict[str, Any]]:
    """`【cursor†Lstart-Lend】` citations of browser pages as `url_citation` annotations."""
    pages = r.pages
    if not pages:
        return []
    text, out = h.text_of(msg), []
    for m in re.finditer(r"【(\d+)†L(\d+)(?:-L(\d+))?】", text):
        page = pages.get(int(m.group(1)))
        target = cited(page, int(m.group(2))) if page else None
        if target:
            out.append({"type": "url_citation", "start_index": m.start(), "end_index": m.end(),
                        "url": target[1], "title": target[0]})  # fmt: skip
    return out


def tool_args(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The JSON object a tool call carries, or an error message the model can act on."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        return (
            None,
            f"Error: the tool arguments are not valid JSON ({exc.msg} at position {exc.pos}). Send one JSON object.",
        )
    if not isinstance(value, dict):
        return None, "Error: the tool arguments must be a JSON object."
    return value, None
