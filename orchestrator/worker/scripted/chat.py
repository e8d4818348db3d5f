"""The SCRIPTED stand-in's `/v1/chat/completions` adapter: vLLM's wire format for chat-template models
(streaming and not, `return_token_ids`, `stream_options.include_usage`), plus `/tokenize`.

It plays the part of vLLM's chat template, tool parser and reasoning parser: it says what a model
*chose*, already parsed. A rule's `match` regex is searched in the last message rendered as
`user: TEXT`, `system: TEXT`, `assistant: TEXT` or `tool NAME: TEXT` (NAME: the function of the call it
answers), followed by a line `tool_choice: required` or `tool_choice: NAME` when the request forces one:
```yaml
model: scripted-chat
rules:
  - match: "^tool get_weather: "
    reply: {content: "It is sunny."}
  - match: "^user: .*weather"
    reply: {reasoning: "A tool knows.", tool_calls: [{name: get_weather, arguments: '{"city": "Paris"}'}]}
default: {content: "Hello from the scripted chat worker."}
```
Each reasoning / content piece (a word with its leading space) streams as one token, as do a tool call's
name and each piece of its arguments; `status: N` answers HTTP N instead (the completions adapter's
`fail_after`, `tokens` and `delay_s` are not read here). Token ids come from a vocabulary the worker grows
as it meets new pieces; `/tokenize` answers with them (so the orchestrator's automatic path choice sees no
Harmony `<|start|>` token and picks the chat path).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator.worker.scripted.routes import MAX_MODEL_LEN, bad_request, build, counted, scripted_status, sse
from orchestrator.worker.scripted.rules import ChatScenario, Rule, Scenario, Stats, cached_prefix

_PIECE = re.compile(r"\s*\S+|\s+")


def tail(messages: list[dict[str, Any]], tool_choice: Any) -> str:
    """The text rules match: the last message, and the tool_choice when it forces a call."""
    names = {c.get("id"): (c.get("function") or {}).get("name") for m in messages for c in m.get("tool_calls") or []}
    last = messages[-1] if messages else {"role": "user", "content": ""}
    content = last.get("content") if isinstance(last.get("content"), str) else json.dumps(last.get("content"))
    text = (
        f"tool {names.get(last.get('tool_call_id'))}: {content}"
        if last["role"] == "tool"
        else (f"{last['role']}: {content}")
    )
    if tool_choice == "required":
        text += "\ntool_choice: required"
    elif isinstance(tool_choice, dict):
        text += f"\ntool_choice: {(tool_choice.get('function') or {}).get('name')}"
    return text


class ScriptedChatModel:
    def __init__(self, scenario: ChatScenario | None = None, *, cache_prompts: int = 64) -> None:
        self.scenario = scenario or ChatScenario()
        self.vocab: dict[str, int] = {}
        self._seen: deque[list[int]] = deque(maxlen=cache_prompts)
        self.requests: deque[dict[str, Any]] = deque(maxlen=cache_prompts)  # bodies, for tests to inspect
        self.usages: deque[dict[str, Any]] = deque(maxlen=cache_prompts)  # the usage of each completion
        self.stats = Stats()

    def ids(self, text: str) -> list[int]:
        return [self.vocab.setdefault(p, len(self.vocab) + 1) for p in _PIECE.findall(text)]

    def prompt(self, body: dict[str, Any]) -> list[int]:
        """The prompt's token ids: the messages and tools in a ChatML-like rendering (a stand-in template)."""
        text = "".join(
            f"<|im_start|>{m.get('role')}\n{json.dumps(m, sort_keys=True)}<|im_end|>\n"
            for m in body.get("messages") or []
        )
        return self.ids(json.dumps(body.get("tools") or []) + text + "<|im_start|>assistant\n")

    def rule(self, body: dict[str, Any]) -> Rule | None:
        return self.scenario.first(tail(body.get("messages") or [], body.get("tool_choice")))

    def answer(self, body: dict[str, Any], rule: Rule | None) -> Answer:
        reply = rule.reply if rule is not None else self.scenario.default
        prompt = self.prompt(body)
        cached = self.stats.cache(len(prompt), cached_prefix(self._seen, prompt))
        done = answer_of(body, prompt, self.deltas(reply), cached, self.scenario.model)
        self._seen.append(prompt + done.output)
        self.usages.append(done.usage)
        return done

    def deltas(self, reply: dict[str, Any]) -> list[tuple[dict[str, Any], list[int]]]:
        """The reply as vLLM streams it: (delta, token ids) per step."""
        out: list[tuple[dict[str, Any], list[int]]] = []
        for key in ("reasoning", "content"):
            out += [({key: p}, self.ids(p)) for p in _PIECE.findall(str(reply.get(key) or ""))]
        for index, call in enumerate(reply.get("tool_calls") or []):
            args = call.get("arguments", {})
            args = args if isinstance(args, str) else json.dumps(args)
            head = {
                "index": index,
                "id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}",
                "type": "function",
                "function": {"name": call["name"]},
            }
            out.append(({"tool_calls": [head]}, self.ids(call["name"])))
            for piece in _PIECE.findall(args):
                out.append(({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, self.ids(piece)))
        return out


Steps = list[tuple[dict[str, Any], list[int]]]


@dataclass
class Answer:
    """One chat completion: its steps (delta, token ids), how it finishes, and its usage."""

    prompt: list[int]
    steps: Steps
    finish: str
    usage: dict[str, Any]
    id: str
    created: int
    model: str
    with_ids: bool

    @property
    def output(self) -> list[int]:
        return [t for _, ids in self.steps for t in ids]

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        obj = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        return sse(obj)


def answer_of(body: dict[str, Any], prompt: list[int], steps: Steps, cached: int, model: str) -> Answer:
    """The reply as steps, cut at `max_tokens` (finish `length`); `cached`: the prompt tokens a prefix cache held."""
    limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 1 << 30)
    finish = "tool_calls" if any("tool_calls" in delta for delta, _ in steps) else "stop"
    if sum(len(ids) for _, ids in steps) > limit:
        kept, n = [], 0
        for delta, ids in steps:
            if n + len(ids) > limit:
                break
            kept.append((delta, ids))
            n += len(ids)
        steps, finish = kept, "length"
    output = sum(len(ids) for _, ids in steps)
    usage = {
        "prompt_tokens": len(prompt),
        "completion_tokens": output,
        "total_tokens": len(prompt) + output,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    cid = f"chatcmpl-{uuid.uuid4().hex}"
    return Answer(prompt, steps, finish, usage, cid, int(time.time()), model, bool(body.get("return_token_ids")))


async def _stream(a: Answer, body: dict[str, Any], delay: float) -> AsyncIterator[str]:
    """The role chunk, one chunk per step (the last with the finish reason), a usage chunk when asked, [DONE]."""
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    yield a.chunk([first], **({"prompt_token_ids": a.prompt} if a.with_ids else {}))
    for i, (delta, ids) in enumerate(a.steps):
        if delay:
            await asyncio.sleep(delay)
        last = i == len(a.steps) - 1
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": a.finish if last else None}
        if a.with_ids:
            choice["token_ids"] = ids
        yield a.chunk([choice])
    if not a.steps:
        yield a.chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": a.finish}])
    if (body.get("stream_options") or {}).get("include_usage"):
        yield a.chunk([], usage=a.usage)
    yield sse("[DONE]")


class ChatStandIn(Protocol):
    """What `chat_route` needs of a stand-in: its rules, its counters, and the answer a rule (or none) gives."""

    requests: deque[dict[str, Any]]

    @property
    def scenario(self) -> Scenario: ...

    @property
    def stats(self) -> Stats: ...

    def rule(self, body: dict[str, Any]) -> Rule | None: ...

    def answer(self, body: dict[str, Any], rule: Rule | None) -> Answer: ...


def chat_route(model: ChatStandIn) -> Route:
    """`POST /v1/chat/completions`: a scripted status, or the answer whole or streamed."""

    async def completions(request: Request) -> Response:
        try:
            body = await request.json()
            if not isinstance(body.get("messages"), list) or not body["messages"]:
                raise ValueError("messages must be a non-empty list")
            rule = model.rule(body)
        except Exception as exc:
            return bad_request(exc)
        model.stats.requests += 1
        model.requests.append(body)
        if rule is not None and rule.status:
            return scripted_status(model.stats, rule.status)
        reply = model.answer(body, rule)
        if not body.get("stream"):
            model.stats.completed += 1
            return JSONResponse(_whole(reply))
        return counted(model.stats, _stream(reply, body, model.scenario.token_delay_s), reply.id)

    return Route("/v1/chat/completions", completions, methods=["POST"])


def build_chat_app(model: ScriptedChatModel) -> Starlette:
    """`/v1/chat/completions`, `/tokenize` and the shared routes."""

    async def tokenize(request: Request) -> Response:
        body = await request.json()
        tokens = model.prompt(body) if "messages" in body else model.ids(str(body.get("prompt") or ""))
        return JSONResponse(
            {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens, "token_strs": None}
        )

    return build(model, [chat_route(model), Route("/tokenize", tokenize, methods=["POST"])])


def _whole(a: Answer) -> dict[str, Any]:
    """The non-streaming body: the same steps folded into one assistant message."""
    message: dict[str, Any] = {"role": "assistant", "content": "", "reasoning": None, "tool_calls": []}
    for delta, _ in a.steps:
        for key in ("reasoning", "content"):
            if key in delta:
                message[key] = (message[key] or "") + delta[key]
        for tc in delta.get("tool_calls") or []:
            if "id" in tc:
                function = {"name": tc["function"]["name"], "arguments": ""}
                message["tool_calls"].append({"id": tc["id"], "type": "function", "function": function})
            else:
                message["tool_calls"][tc["index"]]["function"]["arguments"] += tc["function"]["arguments"]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": a.finish, "stop_reason": None}
    body = {
        "id": a.id,
        "object": "chat.completion",
        "created": a.created,
        "model": a.model,
        "choices": [choice],
        "usage": a.usage,
    }
    if a.with_ids:
        choice["token_ids"] = a.output
        body["prompt_token_ids"] = a.prompt
    return body
