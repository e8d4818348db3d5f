"""One chat-path turn: the conversation as chat messages to `/v1/chat/completions`, and the worker's
streamed deltas as the same output items the Harmony path makes (the items themselves are the kinds').

vLLM's tool parser and reasoning parser do the parsing; here only the deltas are sorted: `reasoning`
(vLLM 0.32's field; `reasoning_content` before it) into a reasoning item, `content` into a message,
each `tool_calls[index]` into the item its tool makes. A function call's arguments stream as they come;
python's `{"code": ...}` is JSON until it is complete, so its code arrives as one delta at the end.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.chat.messages import ChatTools, to_chat
from orchestrator.errors import RequestError
from orchestrator.kinds import Stream, open_stream
from orchestrator.responses.run import Call, Run, Turn
from orchestrator.worker.client import Chat, ChatRequest, CountChat


class ChatTurns:
    """The TurnModel of chat workers."""

    def __init__(self, chat: Chat, tools: ChatTools, count_chat: CountChat | None = None) -> None:
        self.chat, self.tools, self.count_chat = chat, tools, count_chat

    async def count(self, r: Run) -> int:
        if self.count_chat is None:
            raise RequestError("this orchestrator has no worker pool to count chat-path tokens with", None, 503)
        return await self.count_chat(ChatRequest(self.body(r, 1), r.affinity))

    def body(self, r: Run, budget: int) -> dict[str, Any]:
        tools, choice = self.tools.choice(r.turn.required)
        body: dict[str, Any] = {
            "messages": to_chat(r.messages, self.tools.freeform),
            "max_tokens": budget,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        }
        if tools:
            body.update(tools=tools, tool_choice=choice)
        body.update(r.sampling)
        if r.effort is not None:  # vLLM hands the template `reasoning_effort`, and `enable_thinking` false for none
            body["reasoning_effort"] = r.effort
        if r.turn.answer_format is not None:  # vLLM constrains the content; the reasoning parser keeps reasoning free
            body["response_format"] = r.turn.answer_format.response_format
        return body

    async def aside(self, r: Run, messages: list[Message], budget: int) -> str:
        body = {
            "messages": to_chat(messages, self.tools.freeform),
            "max_tokens": budget,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        text: list[str] = []
        usage: dict[str, Any] = {}
        async with contextlib.aclosing(self.chat(ChatRequest(body, r.affinity))) as chunks:
            async for obj in chunks:
                usage = obj.get("usage") or usage
                text += [(c.get("delta") or {}).get("content") or "" for c in obj.get("choices") or []]
        r.usage.account(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        return "".join(text)

    async def turn(self, r: Run, budget: int) -> Turn:
        stream = _Deltas(r, self.tools)
        try:
            async with contextlib.aclosing(self.chat(ChatRequest(self.body(r, budget), r.affinity))) as chunks:
                async for obj in chunks:
                    stream.feed(obj)
        except BaseException:
            stream.abort()
            raise
        finally:
            r.usage.account(stream.prompt_tokens, stream.output_tokens)
        if stream.finish == "length":
            stream.abort()
            return Turn("length")
        return stream.end()


@dataclass
class _Call:
    """One `tool_calls[index]` of the stream, as its name and arguments arrive."""

    name: str = ""
    arguments: str = ""
    recipient: str = ""
    item: Stream | None = None
    admitted: bool = True  # within max_tool_calls; a call past it gets no item and is never run


@dataclass
class _Deltas:
    r: Run
    tools: ChatTools
    text: Stream | None = None
    text_channel: str = ""
    text_parts: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: str | None = None
    prompt_ids: int = 0
    counted: int = 0  # output tokens seen in the chunks (token ids, else one per delta)
    reasoning: int = 0  # of which reasoning
    usage: dict[str, Any] | None = None

    @property
    def prompt_tokens(self) -> int:
        return int((self.usage or {}).get("prompt_tokens") or self.prompt_ids)

    @property
    def output_tokens(self) -> int:
        return int((self.usage or {}).get("completion_tokens") or self.counted)

    def feed(self, obj: dict[str, Any]) -> None:
        if obj.get("prompt_token_ids") is not None:  # first chunk, with return_token_ids
            self.prompt_ids = len(obj["prompt_token_ids"])
        if usage := obj.get("usage"):
            self.usage = usage
            self.r.usage.cached += int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            reported = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
            if isinstance(reported, int):  # the worker's own count wins over the one from the deltas
                self.r.usage.reasoning += reported - self.reasoning
                self.reasoning = reported
        for choice in (obj.get("choices") or [])[:1]:
            delta = choice.get("delta") or {}
            ids = choice.get("token_ids")
            produced = len(ids) if isinstance(ids, list) else 0
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            content, tool_calls = delta.get("content"), delta.get("tool_calls") or []
            if not produced and (reasoning or content or tool_calls):
                produced = 1  # a worker without return_token_ids: one token per delta
            self.counted += produced
            if reasoning:
                self.r.usage.reasoning += produced
                self.reasoning += produced
                self._text("analysis", reasoning)
            if content:
                self._text("final", content)
            for tc in tool_calls:
                self._tool(tc)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def _text(self, channel: str, delta: str) -> None:
        if self.text is None or self.text_channel != channel:
            self._close_text()
            self.text, self.text_channel, self.text_parts = open_stream(self.r, channel, None), channel, []
        if self.text is not None:
            self.text.delta(delta)
        self.text_parts.append(delta)

    def _close_text(self, complete: bool = True) -> None:
        if self.text is None:
            return
        item, text = self.text, "".join(self.text_parts)
        channel = self.text_channel if self.text_channel == "analysis" or not self.calls else "commentary"
        msg = h.assistant(text, channel)
        self.r.messages.append(msg)
        if item is not None:
            item.close(msg, complete=complete)
        self.text = None

    def _tool(self, tc: dict[str, Any]) -> None:
        index = tc.get("index", 0)
        fn = tc.get("function") or {}
        call = self.calls.get(index)
        if call is None:
            self.calls[index] = call = _Call()
            self._close_text()  # what came before the call is a preamble
        call.name += fn.get("name") or ""
        if fn.get("arguments"):
            call.arguments += fn["arguments"]
            if call.item is not None and call.item.shows_arguments:
                call.item.delta(fn["arguments"])
        if not call.recipient and call.name:
            self._open(call)

    def _open(self, call: _Call) -> None:
        call.recipient = recipient = self.tools.recipient(call.name)
        call.admitted = self.r.tools.admit(self.r.limits)
        if not call.admitted:
            return  # past max_tool_calls: no item, no events
        call.item = open_stream(self.r, None, recipient)
        if call.item is not None and call.item.shows_arguments and call.arguments:
            call.item.delta(call.arguments)

    def end(self) -> Turn:
        self._close_text()
        calls: list[Call] = []
        rejected = False
        for call in self.calls.values():
            if not call.recipient:
                continue  # a tool-call delta without a name: nothing the loop could run
            if not call.admitted:
                msg = self.tools.from_chat(call.recipient, call.arguments)[0]  # kept, never run
                self.r.messages.append(msg)
                calls.append(Call(msg, None, admitted=False))
                continue
            msg = self._finish_call(call)
            if msg is None:
                rejected = True
                continue
            calls.append(Call(msg, call.item))
            if self.r.turn.required is not None and self.r.turn.required.met_by(call.recipient):
                self.r.turn.required = None
        if calls:
            return Turn("call", calls)
        return Turn("retry" if rejected and self.r.tools.count < self.r.limits.max_turns else "return")

    def _finish_call(self, call: _Call) -> Message | None:
        """The call as a Harmony message (its kind reads the arguments), appended to the conversation; None
        when the kind refuses them (python without `code`): the model is told and writes it again."""
        r, item = self.r, call.item
        msg, err = self.tools.from_chat(call.recipient, call.arguments)
        if err is not None:
            if item is not None:
                item.close(msg, complete=False)
            r.messages += [msg, h.tool_result(call.recipient, err, msg.channel)]
            r.tools.log.append((call.recipient.partition(".")[0], "rejected"))
            return None
        if item is not None:
            if not item.shows_arguments:  # e.g. python's code, readable only once its JSON is complete
                item.delta(h.text_of(msg))
            item.close(msg)  # a function call with bad JSON closes incomplete; the loop tells the model
        r.messages.append(msg)
        return msg

    def abort(self) -> None:
        """The stream ended early (length limit, worker failure, cancel): close what is open as incomplete."""
        self._close_text(complete=False)
        for call in self.calls.values():
            if call.item is not None and call.item.in_progress:
                call.item.close(h.assistant(call.arguments, "commentary", call.recipient), complete=False)
        self.calls.clear()
