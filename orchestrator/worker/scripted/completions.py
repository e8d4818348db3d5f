"""The SCRIPTED stand-in's `/v1/completions` adapter: vLLM's wire format for Harmony models (token-id
prompts, `return_token_ids`, streaming or not, `stream_options.include_usage`, `logprobs`).

A rule's `match` is searched in the decoded last message of the prompt (special tokens included, e.g.
`<|start|>user<|message|>weather?<|end|>` and the assistant header after it); its `reply` is Harmony text
such as `<|channel|>final<|message|>Hi<|return|>`, encoded to token ids (or `tokens`, ids as they are).
A rule may also misbehave on purpose, as a failing vLLM worker does: `status: 503` answers that HTTP
status at once; `fail_after: N` sends N tokens, then `fail_mode: drop` (default) closes the connection
mid-stream and `fail_mode: error` sends vLLM's in-stream error chunk (`data: {"error": {...}}`, then
`[DONE]`); `delay_s` overrides the scenario's `token_delay_s`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator.harmony import STOP_TOKENS, encoding
from orchestrator.worker.scripted.chat import chat_route
from orchestrator.worker.scripted.harmony_chat import HarmonyChat
from orchestrator.worker.scripted.model import ScriptedModel
from orchestrator.worker.scripted.routes import (
    DroppedConnection,
    ScriptedEnd,
    bad_request,
    build,
    counted,
    scripted_status,
    sse,
)
from orchestrator.worker.scripted.rules import Rule

log = structlog.get_logger(__name__)


def fake_logprob(token: int) -> float:
    """The scripted logprob of a sampled token: deterministic, so tests can check alignment."""
    return -round((token % 97) / 100, 2)


def _fake_logprobs(token: int, top: int, offset: int) -> dict[str, Any]:
    """vLLM's completion logprobs for one token: the sampled token plus `top` alternatives (worse ones)."""
    text, value = encoding().decode([token]), fake_logprob(token)
    ranked = {text: value, **{f"<alt{k}>": round(value - 1 - k, 2) for k in range(top)}}
    return {"text_offset": [offset], "token_logprobs": [value], "tokens": [text], "top_logprobs": [ranked]}


@dataclass
class _Answer:
    """One completion: the prompt, the tokens it answers with, and how it finishes."""

    prompt: list[int]
    output: list[int]
    finish: str
    stop_reason: int | None
    usage: dict[str, Any]
    id: str
    created: int
    model: str

    def body(self, choices: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage,
        }


def _answer(model: ScriptedModel, body: dict[str, Any], prompt: list[int]) -> _Answer:
    """The reply cut at the first stop token (`stop_token_ids`, else Harmony's) and at `max_tokens`."""
    output = model.reply(prompt)
    stops = set(body.get("stop_token_ids") or STOP_TOKENS)
    end = next((i + 1 for i, tok in enumerate(output) if tok in stops), len(output))
    output = output[:end]
    finish, stop_reason = ("stop", output[-1]) if output and output[-1] in stops else ("length", None)
    max_tokens = int(body.get("max_tokens") or 16)
    if len(output) > max_tokens:
        output, finish, stop_reason = output[:max_tokens], "length", None
    cached = model.stats.cache(len(prompt), model.cached(prompt))
    model.remember(prompt, output)
    usage = {
        "prompt_tokens": len(prompt),
        "total_tokens": len(prompt) + len(output),
        "completion_tokens": len(output),
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    log.info("scripted.completion", prompt_tokens=len(prompt), output_tokens=len(output), cached=cached)
    cid = f"cmpl-{uuid.uuid4().hex}"
    return _Answer(prompt, output, finish, stop_reason, usage, cid, int(time.time()), model.scenario.model)


async def _stream(a: _Answer, rule: Rule | None, body: dict[str, Any], delay: float) -> AsyncIterator[str]:
    """The answer one token per chunk (the first with the prompt's ids), a usage chunk when asked, [DONE]."""
    want_logprobs = body.get("logprobs") if isinstance(body.get("logprobs"), int) else None
    fail_after = rule.fail_after if rule is not None else None
    offset = 0
    for i, tok in enumerate(a.output):
        if fail_after is not None and i == fail_after:
            if rule is not None and rule.fail_mode == "drop":
                raise DroppedConnection(f"scripted worker dropped the connection after {i} tokens")
            error = {"message": "scripted engine failure", "type": "InternalServerError", "param": None, "code": 500}
            yield sse({"error": error})
            yield sse("[DONE]")
            raise ScriptedEnd
        if delay:
            await asyncio.sleep(delay)
        last = i == len(a.output) - 1
        choice = {
            "index": 0,
            "text": encoding().decode([tok]),
            "logprobs": None,
            "finish_reason": a.finish if last else None,
            "stop_reason": a.stop_reason if last else None,
            "token_ids": [tok],
        }
        if i == 0:
            choice["prompt_token_ids"] = a.prompt
        if want_logprobs is not None:
            choice["logprobs"] = _fake_logprobs(tok, want_logprobs, offset)
            offset += len(choice["text"])
        yield sse(a.body([choice]))
    if (body.get("stream_options") or {}).get("include_usage"):
        yield sse(a.body([], a.usage))
    yield sse("[DONE]")


def _whole(a: _Answer) -> dict[str, Any]:
    """The non-streaming body."""
    choice = {
        "index": 0,
        "text": encoding().decode(a.output),
        "logprobs": None,
        "finish_reason": a.finish,
        "stop_reason": a.stop_reason,
        "prompt_token_ids": a.prompt,
        "token_ids": a.output,
    }
    return a.body([choice], a.usage)


def build_app(model: ScriptedModel) -> Starlette:
    """`/v1/completions` (token-id prompts, `return_token_ids`, streaming or not), `/v1/chat/completions` (the
    same rules on the messages rendered to Harmony, `harmony_chat`) and the shared routes."""

    async def completions(request: Request) -> Response:
        try:
            body = await request.json()
            prompt = body["prompt"]
            if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
                raise ValueError("prompt must be a list of token ids")
        except Exception as exc:
            return bad_request(exc)
        model.stats.requests += 1
        model.options.append({k: v for k, v in body.items() if k != "prompt"})
        rule = model.rule(prompt)
        if rule is not None and rule.status:
            return scripted_status(model.stats, rule.status)
        answer = _answer(model, body, prompt)
        if not body.get("stream"):
            model.stats.completed += 1
            return JSONResponse(_whole(answer))
        delay = rule.delay_s if rule is not None and rule.delay_s is not None else model.scenario.token_delay_s
        return counted(model.stats, _stream(answer, rule, body, delay), answer.id)

    routes = [Route("/v1/completions", completions, methods=["POST"]), chat_route(HarmonyChat(model))]
    return build(model, routes)
