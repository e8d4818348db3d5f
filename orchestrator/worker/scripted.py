"""A scripted stand-in for a vLLM worker: same `/v1/completions` wire format, replies chosen by scenario rules.

A scenario (YAML or JSON) lists rules; the first rule whose `match` regex is found in the decoded last
message of the prompt (special tokens included, e.g. `<|start|>user<|message|>weather?<|end|>`) gives
the reply, Harmony text such as `<|channel|>final<|message|>Hi<|return|>`, encoded to token ids.
```yaml
model: scripted-gpt-oss
rules:
  - match: "functions.get_weather to=assistant"
    reply: "<|channel|>final<|message|>It is sunny.<|return|>"
  - match: "weather"
    reply: "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\\"city\\":\\"Paris\\"}<|call|>"
default: "<|channel|>final<|message|>Hello from the scripted worker.<|return|>"
```
A rule may also misbehave on purpose, as a failing vLLM worker does: `status: 503` answers that HTTP
status at once; `fail_after: N` sends N tokens, then `fail_mode: drop` (default) closes the connection
mid-stream and `fail_mode: error` sends vLLM's in-stream error chunk (`data: {"error": {...}}`, then
`[DONE]`); `delay_s` overrides the scenario's `token_delay_s`. `GET /debug/stats` counts requests and
how they ended: `aborted` are streams whose client went away before the end (vLLM aborts those).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator.harmony import START, STOP_TOKENS, encoding

log = structlog.get_logger(__name__)
DEFAULT_REPLY = "<|channel|>final<|message|>Hello from the scripted worker.<|return|>"


@dataclass
class Rule:
    match: re.Pattern[str]
    reply: str
    tokens: list[int] | None = None
    status: int | None = None  # answer this HTTP status instead of a completion
    fail_after: int | None = None  # stop the stream after this many tokens
    fail_mode: str = "drop"  # drop: close the connection; error: vLLM's in-stream error chunk
    delay_s: float | None = None  # per-token delay for this rule

    @classmethod
    def from_dict(cls, r: dict[str, Any]) -> Rule:
        if r.get("fail_mode", "drop") not in ("drop", "error"):
            raise ValueError("fail_mode must be drop or error")
        return cls(re.compile(r["match"], re.S), r.get("reply", ""), r.get("tokens"), r.get("status"),
                   r.get("fail_after"), r.get("fail_mode", "drop"), r.get("delay_s"))  # fmt: skip


class DroppedConnection(Exception):
    """Raised inside a streaming body to make the server close the connection mid-stream (a dying worker)."""


@dataclass
class Stats:
    requests: int = 0
    completed: int = 0
    aborted: int = 0  # the client went away before the end of the stream
    failed: int = 0  # a scripted failure (status, drop or error chunk)
    in_flight: int = 0


@dataclass
class Scenario:
    rules: list[Rule] = field(default_factory=list)
    default: str = DEFAULT_REPLY
    model: str = "scripted-gpt-oss"
    token_delay_s: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        rules = [Rule.from_dict(r) for r in data.get("rules", [])]
        return cls(
            rules=rules,
            default=data.get("default", DEFAULT_REPLY),
            model=data.get("model", "scripted-gpt-oss"),
            token_delay_s=float(data.get("token_delay_s", 0.0)),
        )

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        return cls.from_dict(yaml.safe_load(Path(path).read_text()))


class ScriptedModel:
    """Picks the reply for a prompt and reports prefix-cache hits against the prompts it has seen."""

    def __init__(self, scenario: Scenario, *, cache_prompts: int = 64) -> None:
        self.scenario = scenario
        self._seen: deque[list[int]] = deque(maxlen=cache_prompts)
        self.prompts: deque[list[int]] = deque(maxlen=cache_prompts)  # for tests to inspect
        self.options: deque[dict[str, Any]] = deque(maxlen=cache_prompts)  # each request's body but the prompt
        self._encoded: dict[str, list[int]] = {}
        self.stats = Stats()

    def _tokens(self, text: str) -> list[int]:
        if text not in self._encoded:
            self._encoded[text] = encoding().encode(text, allowed_special="all")
        return self._encoded[text]

    def reply(self, prompt: list[int]) -> list[int]:
        rule = self.rule(prompt)
        if rule is None:
            return self._tokens(self.scenario.default)
        return list(rule.tokens) if rule.tokens is not None else self._tokens(rule.reply)

    def rule(self, prompt: list[int]) -> Rule | None:
        """The first rule matching the prompt's last message (and the assistant header after it)."""
        starts = [i for i, t in enumerate(prompt) if t == START]
        tail_from = starts[-2] if len(starts) >= 2 else 0
        tail = encoding().decode(prompt[tail_from:])
        return next((rule for rule in self.scenario.rules if rule.match.search(tail)), None)

    def cached(self, prompt: list[int]) -> int:
        return cached_prefix(self._seen, prompt)

    def encode_prompt_text(self, index: int) -> str:
        """A prompt this model saw, decoded (tests inspect what the orchestrator rendered)."""
        return encoding().decode(self.prompts[index])

    def remember(self, prompt: list[int], output: list[int]) -> None:
        self._seen.append(prompt + output)
        self.prompts.append(prompt)


def cached_prefix(seen: Iterable[list[int]], prompt: list[int]) -> int:
    """Prompt tokens a prefix cache would hold: the longest prefix shared with a sequence seen before
    (at least the last prompt token is always computed, as in vLLM)."""
    best = 0
    for tokens in seen:
        n = 0
        for a, b in zip(tokens, prompt, strict=False):
            if a != b:
                break
            n += 1
        best = max(best, n)
    return min(best, len(prompt) - 1) if prompt else 0


def _chunk(cid: str, created: int, model: str, choice: dict[str, Any] | None, usage: Any = None) -> str:
    body = {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [choice] if choice else [],
        "usage": usage,
    }
    return f"data: {json.dumps(body, separators=(',', ':'), ensure_ascii=False)}\n\n"


def fake_logprob(token: int) -> float:
    """The scripted logprob of a sampled token: deterministic, so tests can check alignment."""
    return -round((token % 97) / 100, 2)


def _fake_logprobs(token: int, top: int, offset: int) -> dict[str, Any]:
    """vLLM's completion logprobs for one token: the sampled token plus `top` alternatives (worse ones)."""
    text, value = encoding().decode([token]), fake_logprob(token)
    ranked = {text: value, **{f"<alt{k}>": round(value - 1 - k, 2) for k in range(top)}}
    return {"text_offset": [offset], "token_logprobs": [value], "tokens": [text], "top_logprobs": [ranked]}


def build_app(model: ScriptedModel) -> Starlette:
    """`/v1/completions` (token-id prompts, `return_token_ids`, streaming or not), `/v1/models`, `/health`."""

    async def completions(request: Request) -> Response:
        try:
            body = await request.json()
            prompt = body["prompt"]
            if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
                raise ValueError("prompt must be a list of token ids")
        except Exception as exc:
            return JSONResponse({"error": {"message": f"bad request: {exc}", "type": "BadRequestError"}}, 400)
        scenario = model.scenario
        stats = model.stats
        stats.requests += 1
        model.options.append({k: v for k, v in body.items() if k != "prompt"})
        rule = model.rule(prompt)
        if rule is not None and rule.status:
            stats.failed += 1
            message = {"message": f"scripted failure (HTTP {rule.status})", "type": "InternalServerError",
                       "param": None, "code": rule.status}  # fmt: skip
            return JSONResponse({"error": message}, rule.status)
        max_tokens = int(body.get("max_tokens") or 16)
        output = model.reply(prompt)
        stops = set(body.get("stop_token_ids") or STOP_TOKENS)
        for i, tok in enumerate(output):
            if tok in stops:
                output = output[: i + 1]
                break
        finish, stop_reason = ("stop", output[-1]) if output and output[-1] in stops else ("length", None)
        if len(output) > max_tokens:
            output, finish, stop_reason = output[:max_tokens], "length", None
        cached = model.cached(prompt)
        model.remember(prompt, output)
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        usage = {
            "prompt_tokens": len(prompt),
            "total_tokens": len(prompt) + len(output),
            "completion_tokens": len(output),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        log.info("scripted.completion", prompt_tokens=len(prompt), output_tokens=len(output), cached=cached)
        if not body.get("stream"):
            stats.completed += 1
            choice = {"index": 0, "text": encoding().decode(output), "logprobs": None, "finish_reason": finish,
                      "stop_reason": stop_reason, "prompt_token_ids": prompt, "token_ids": output}  # fmt: skip
            return JSONResponse({"id": cid, "object": "text_completion", "created": created,
                                 "model": scenario.model, "choices": [choice], "usage": usage})  # fmt: skip
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        delay = rule.delay_s if rule is not None and rule.delay_s is not None else scenario.token_delay_s
        want_logprobs = body.get("logprobs") if isinstance(body.get("logprobs"), int) else None
        offset = 0
        fail_after = rule.fail_after if rule is not None else None

        async def stream():
            nonlocal offset
            outcome = "aborted"  # unless the stream gets to its end (or to its scripted failure)
            stats.in_flight += 1
            try:
                for i, tok in enumerate(output):
                    if fail_after is not None and i == fail_after:
                        outcome = "failed"
                        if rule.fail_mode == "drop":
                            raise DroppedConnection(f"scripted worker dropped the connection after {i} tokens")
                        error = {"message": "scripted engine failure", "type": "InternalServerError",
                                 "param": None, "code": 500}  # fmt: skip
                        yield f"data: {json.dumps({'error': error})}\n\n"
                        yield "data: [DONE]\n\n"
                        return
                    if delay:
                        await asyncio.sleep(delay)
                    last = i == len(output) - 1
                    choice = {"index": 0, "text": encoding().decode([tok]), "logprobs": None,
                              "finish_reason": finish if last else None,
                              "stop_reason": stop_reason if last else None, "token_ids": [tok]}  # fmt: skip
                    if i == 0:
                        choice["prompt_token_ids"] = prompt
                    if want_logprobs is not None:
                        choice["logprobs"] = _fake_logprobs(tok, want_logprobs, offset)
                        offset += len(choice["text"])
                    yield _chunk(cid, created, scenario.model, choice)
                if include_usage:
                    yield _chunk(cid, created, scenario.model, None, usage)
                yield "data: [DONE]\n\n"
                outcome = "completed"
            finally:
                stats.in_flight -= 1
                setattr(stats, outcome, getattr(stats, outcome) + 1)
                if outcome == "aborted":
                    log.info("scripted.aborted", request_id=cid)  # as vLLM logs "Aborted request ..."

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def models(request: Request) -> Response:
        scenario = model.scenario
        card = {"id": scenario.model, "object": "model", "created": 0, "owned_by": "toolfleet-scripted",
                "root": scenario.model, "parent": None, "max_model_len": 131072, "scripted": True}  # fmt: skip
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def debug_stats(request: Request) -> Response:
        return JSONResponse(dataclasses.asdict(model.stats))

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),  # what vLLM answers
            Route("/healthz", health),  # what every toolfleet service answers (tests/support/service.py waits on it)
            Route("/debug/stats", debug_stats),
        ]
    )
