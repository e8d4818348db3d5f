"""A SCRIPTED stand-in for a vLLM chat-template worker: vLLM's `/v1/chat/completions` wire format
(streaming and not, `return_token_ids`, `stream_options.include_usage`), replies chosen by rules.

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
name and each piece of its arguments; `status: N` answers HTTP N instead. Token ids come from a
vocabulary the worker grows as it meets new pieces; `/tokenize` answers with them (so the orchestrator's
automatic path choice sees no Harmony `<|start|>` token and picks the chat path).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator.worker.scripted import Stats, cached_prefix

DEFAULT_REPLY: dict[str, Any] = {"content": "Hello from the scripted chat worker."}
_PIECE = re.compile(r"\s*\S+|\s+")


@dataclass
class ChatRule:
    match: re.Pattern[str]
    reply: dict[str, Any]  # {reasoning?, content?, tool_calls?: [{name, arguments (str or object)}]}
    status: int | None = None


@dataclass
class ChatScenario:
    rules: list[ChatRule] = field(default_factory=list)
    default: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_REPLY))
    model: str = "scripted-chat"
    token_delay_s: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatScenario:
        rules = [
            ChatRule(re.compile(r["match"], re.S | re.M), dict(r.get("reply") or {}), r.get("status"))
            for r in data.get("rules", [])
        ]
        return cls(
            rules,
            dict(data.get("default") or DEFAULT_REPLY),
            data.get("model", "scripted-chat"),
            float(data.get("token_delay_s", 0.0)),
        )

    @classmethod
    def load(cls, path: str | Path) -> ChatScenario:
        return cls.from_dict(yaml.safe_load(Path(path).read_text()))


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

    def rule(self, body: dict[str, Any]) -> ChatRule | None:
        text = tail(body.get("messages") or [], body.get("tool_choice"))
        return next((r for r in self.scenario.rules if r.match.search(text)), None)

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


def build_chat_app(model: ScriptedChatModel) -> Starlette:
    """`/v1/chat/completions`, `/v1/models`, `/tokenize`, `/health`, `/debug/stats`."""

    async def completions(request: Request) -> Response:
        try:
            body = await request.json()
            if not isinstance(body.get("messages"), list) or not body["messages"]:
                raise ValueError("messages must be a non-empty list")
        except Exception as exc:
            return JSONResponse({"error": {"message": f"bad request: {exc}", "type": "BadRequestError"}}, 400)
        model.stats.requests += 1
        model.requests.append(body)
        rule = model.rule(body)
        if rule is not None and rule.status:
            model.stats.failed += 1
            error = {
                "message": f"scripted failure (HTTP {rule.status})",
                "type": "InternalServerError",
                "code": rule.status,
            }
            return JSONResponse({"error": error}, rule.status)
        reply = rule.reply if rule is not None else model.scenario.default
        prompt, steps = model.prompt(body), model.deltas(reply)
        limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 1 << 30)
        finish = "tool_calls" if reply.get("tool_calls") else "stop"
        if sum(len(ids) for _, ids in steps) > limit:
            kept, n = [], 0
            for delta, ids in steps:
                if n + len(ids) > limit:
                    break
                kept.append((delta, ids))
                n += len(ids)
            steps, finish = kept, "length"
        output = [t for _, ids in steps for t in ids]
        usage = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(output),
            "total_tokens": len(prompt) + len(output),
            "prompt_tokens_details": {"cached_tokens": cached_prefix(model._seen, prompt)},
        }
        model._seen.append(prompt + output)
        model.usages.append(usage)
        cid, created, name = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model.scenario.model
        with_ids = bool(body.get("return_token_ids"))
        if not body.get("stream"):
            model.stats.completed += 1
            return JSONResponse(_message_response(cid, created, name, steps, finish, usage, prompt, with_ids))

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
            obj = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": name,
                "choices": choices,
                **extra,
            }
            return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

        async def stream():
            outcome = "aborted"
            model.stats.in_flight += 1
            try:
                first = {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
                yield chunk([first], **({"prompt_token_ids": prompt} if with_ids else {}))
                for i, (delta, ids) in enumerate(steps):
                    if model.scenario.token_delay_s:
                        await asyncio.sleep(model.scenario.token_delay_s)
                    last = i == len(steps) - 1
                    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish if last else None}
                    if with_ids:
                        choice["token_ids"] = ids
                    yield chunk([choice])
                if not steps:
                    yield chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}])
                if (body.get("stream_options") or {}).get("include_usage"):
                    yield chunk([], usage=usage)
                yield "data: [DONE]\n\n"
                outcome = "completed"
            finally:
                model.stats.in_flight -= 1
                setattr(model.stats, outcome, getattr(model.stats, outcome) + 1)

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def tokenize(request: Request) -> Response:
        body = await request.json()
        tokens = model.ids(str(body.get("prompt") or ""))
        return JSONResponse({"count": len(tokens), "max_model_len": 131072, "tokens": tokens, "token_strs": None})

    async def models(request: Request) -> Response:
        card = {
            "id": model.scenario.model,
            "object": "model",
            "created": 0,
            "owned_by": "toolfleet-scripted",
            "root": model.scenario.model,
            "parent": None,
            "max_model_len": 131072,
            "scripted": True,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def debug_stats(request: Request) -> Response:
        return JSONResponse(dataclasses.asdict(model.stats))

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),
            Route("/debug/stats", debug_stats),
        ]
    )


Steps = list[tuple[dict[str, Any], list[int]]]


def _message_response(
    cid: str,
    created: int,
    name: str,
    steps: Steps,
    finish: str,
    usage: dict[str, Any],
    prompt: list[int],
    with_ids: bool,
) -> dict[str, Any]:
    """The non-streaming body: the same steps folded into one assistant message."""
    message: dict[str, Any] = {"role": "assistant", "content": "", "reasoning": None, "tool_calls": []}
    for delta, _ in steps:
        for key in ("reasoning", "content"):
            if key in delta:
                message[key] = (message[key] or "") + delta[key]
        for tc in delta.get("tool_calls") or []:
            if "id" in tc:
                function = {"name": tc["function"]["name"], "arguments": ""}
                message["tool_calls"].append({"id": tc["id"], "type": "function", "function": function})
            else:
                message["tool_calls"][tc["index"]]["function"]["arguments"] += tc["function"]["arguments"]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "stop_reason": None}
    if with_ids:
        choice["token_ids"] = [t for _, ids in steps for t in ids]
    body = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": name,
        "choices": [choice],
        "usage": usage,
    }
    if with_ids:
        body["prompt_token_ids"] = prompt
    return body
