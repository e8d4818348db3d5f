"""`POST /v1/chat/completions` (the route: `api/chat.py`), relayed to the workers, for clients whose default is
chat completions.

The body is checked against `FIELDS`, OpenAI's chat-completions parameters and what this server does with
each, and only the relayed ones go to a worker, with `model` replaced by the worker's own name, through
the same pool as the Responses path: balancing, retry on another worker before the first delta, health.
Nothing else reaches the worker: vLLM's own template and processor fields (`chat_template`,
`logits_processors`, `guided_*`, ...) would let one key change how the worker renders or decodes, and an
unknown field is a 400 naming it rather than a field vLLM would drop silently. `n` is 1 and the token
budget is bounded as a response's is (`--max-output-tokens` when none is asked, at most
`--context-tokens`). The caller's key, rate and running limit apply as on `/v1/responses`: a relayed
completion holds one of the key's running slots until its last chunk. The built-in tools (web search,
code interpreter, MCP) live on `/v1/responses` only: a chat completion is one generation of the model,
tools included, and its tool calls are the client's to run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import structlog

from orchestrator.errors import RequestError
from orchestrator.guard.addresses import hide, worker_roles
from orchestrator.request.schema import check_metadata
from orchestrator.worker.client import WorkerError, WorkerPool, WorkerRefused, WorkerUnavailable

log = structlog.get_logger(__name__)

RELAYED = "relayed"
NO_OP = "accepted, no effect"
REFUSED = "refused (400)"

FIELDS: dict[str, tuple[str, str]] = {
    "audio": (REFUSED, "no audio output"),
    "frequency_penalty": (RELAYED, "sent to the worker"),
    "function_call": (REFUSED, "the deprecated functions API; use `tool_choice`"),
    "functions": (REFUSED, "the deprecated functions API; use `tools`"),
    "logit_bias": (RELAYED, "sent to the worker"),
    "logprobs": (RELAYED, "sent to the worker"),
    "max_completion_tokens": (RELAYED, "1 to `--context-tokens`; neither it nor `max_tokens`: `--max-output-tokens`"),
    "max_tokens": (RELAYED, "as `max_completion_tokens`"),
    "messages": (RELAYED, "a non-empty list; the worker's chat template renders it"),
    "metadata": (NO_OP, "nothing is stored (16 keys of 64, values of 512 characters)"),
    "modalities": (RELAYED, '`["text"]` only (else a 400)'),
    "model": (RELAYED, "picks the workers serving that name; the worker's own name is sent, the caller's echoed"),
    "moderation": (REFUSED, "there is no moderation model here"),
    "n": (RELAYED, "1 only (else a 400)"),
    "parallel_tool_calls": (RELAYED, "sent to the worker"),
    "prediction": (REFUSED, "no predicted outputs"),
    "presence_penalty": (RELAYED, "sent to the worker"),
    "prompt_cache_key": (NO_OP, "the worker's prefix cache keys on the prompt itself"),
    "prompt_cache_options": (NO_OP, "prefix caching is automatic on the worker"),
    "prompt_cache_retention": (NO_OP, "the worker's prefix cache evicts least recently used"),
    "reasoning_effort": (RELAYED, "sent to the worker (its chat template reads it)"),
    "response_format": (RELAYED, "enforced by the worker's structured decoding"),
    "safety_identifier": (NO_OP, "there is no abuse monitoring here"),
    "seed": (RELAYED, "sent to the worker"),
    "service_tier": (NO_OP, "there is one tier"),
    "stop": (RELAYED, "sent to the worker"),
    "store": (NO_OP, "`false` only: chat completions are not stored here (`true` is a 400)"),
    "stream": (RELAYED, "Server-Sent Events"),
    "stream_options": (RELAYED, "`include_usage` sent to the worker; `include_obfuscation` has no effect"),
    "temperature": (RELAYED, "sent to the worker"),
    "tool_choice": (RELAYED, "sent to the worker"),
    "tools": (RELAYED, "function tools, sent to the worker; the client runs the calls"),
    "top_logprobs": (RELAYED, "sent to the worker"),
    "top_p": (RELAYED, "sent to the worker"),
    "user": (NO_OP, "OpenAI replaced it with `safety_identifier` and `prompt_cache_key`"),
    "verbosity": (REFUSED, "the worker has no verbosity control"),
    "web_search_options": (REFUSED, "web search runs on `/v1/responses` (the `web_search` tool)"),
}
"""Every OpenAI chat-completions parameter (the SDK's `CompletionCreateParams`, checked by
`tests/security/test_orch_bounds_relay.py`): relayed to the worker, accepted as a hint with no effect (not
sent), or refused when set. Any other field is a 400 naming it."""

WORKER_ONLY = frozenset(
    {
        "chat_template",
        "chat_template_kwargs",
        "add_generation_prompt",
        "continue_final_message",
        "add_special_tokens",
        "documents",
        "logits_processors",
        "mm_processor_kwargs",
        "media_io_kwargs",
        "structured_outputs",
        "structural_tag",
        "vllm_xargs",
        "kv_transfer_params",
        "allowed_token_ids",
        "bad_words",
    }
)
"""vLLM's template, processor and decoding extensions (and `guided_*`): named as such in their 400, since a
client that sends one expects it to act."""


class UpstreamError(RequestError):
    """The workers could not serve the completion: 502/503 with OpenAI's `server_error` type."""

    etype = "server_error"


class ChatRelay:
    """Relays chat completions for one app (its route holds one of the key's `running` slots for each)."""

    def __init__(self, pool: WorkerPool | None, *, max_output_tokens: int, context_tokens: int) -> None:
        self.pool = pool
        self.max_output_tokens = max_output_tokens
        self.context_tokens = context_tokens
        self.roles = worker_roles([w.url for w in pool.workers] if pool is not None else [])

    def checked(self, body: Any) -> dict[str, Any]:
        """The body the worker gets: relayed fields only, each checked; a 400 naming the first field refused."""
        if self.pool is None:
            raise UpstreamError("this orchestrator has no worker pool to relay chat completions to", None, 503)
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        for name in sorted(body):
            _check_field(name, body[name])
        sent = {k: v for k, v in body.items() if FIELDS[k][0] == RELAYED and v is not None}
        if "stream_options" in sent:
            sent["stream_options"] = {k: v for k, v in sent["stream_options"].items() if k == "include_usage"}
        for name in ("max_tokens", "max_completion_tokens"):
            if name in sent and not 1 <= sent[name] <= self.context_tokens:
                message = f"{name} must be between 1 and {self.context_tokens} (the model's context)"
                raise RequestError(message, name, 400, "invalid_value")
        if "max_tokens" not in sent and "max_completion_tokens" not in sent:
            sent["max_completion_tokens"] = self.max_output_tokens
        return sent

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """A non-streaming completion: the worker's answer, with the caller's model name."""
        async for answer in self._relay(body, stream=False):
            return answer
        raise UpstreamError("the worker sent no answer", None, 502)

    async def opened(self, body: dict[str, Any]) -> tuple[AsyncIterator[str], Callable[[], Awaitable[None]]]:
        """The stream once the worker's first chunk came, and what closes it (the caller's, however the response
        ends): a failure before that chunk is raised, the HTTP error OpenAI answers (a worker's 404 a 404); one
        after it is the stream's error chunk."""
        chunks = self._relay(body, stream=True)
        try:
            first = await anext(chunks)
        except StopAsyncIteration:
            raise UpstreamError("the worker sent no answer", None, 502) from None
        return self._events(first, chunks), chunks.aclose

    @staticmethod
    async def _events(first: dict[str, Any], chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
        """The chunks as Server-Sent Events, an error chunk for a failure mid-stream, then `[DONE]`."""
        try:
            yield _event(first)
            async for chunk in chunks:
                yield _event(chunk)
        except RequestError as exc:
            error = {"message": str(exc), "type": exc.etype, "param": exc.param, "code": exc.code}
            yield _event({"error": error})
        yield "data: [DONE]\n\n"

    async def _relay(self, body: dict[str, Any], *, stream: bool) -> AsyncIterator[dict[str, Any]]:
        assert self.pool is not None
        asked = body.get("model")
        try:
            async for obj in self.pool.relay_chat(body, stream=stream):
                if asked is not None:
                    obj["model"] = asked
                yield obj
        except WorkerRefused as exc:
            raise refusal(exc, asked, self.roles) from None
        except WorkerUnavailable as exc:
            log.warning("chat.relay_unavailable", error=str(exc))
            message = f"model {_name(asked)}: {hide(str(exc), self.roles)}"
            raise UpstreamError(message, None, 503, "worker_unavailable") from None
        except WorkerError as exc:
            log.warning("chat.relay_failed", error=str(exc))
            message = f"model {_name(asked)}: {hide(str(exc), self.roles)}"
            raise UpstreamError(message, None, 502, "worker_error") from None


def refusal(exc: WorkerRefused, model: Any, roles: dict[str, str]) -> RequestError:
    """A worker's 4xx in OpenAI's error shape, naming the model and the cause, never the worker's address: a 404
    is a worker without chat completions (the model is not served on this route), a 400/422 the worker's
    verdict on the request (its message), any other 4xx the worker's fault, not the caller's (502)."""
    log.warning("chat.relay_refused", status=exc.status, error=str(exc))
    said, param = _worker_error(exc.text)
    said, name = hide(said, roles), _name(model)
    if exc.status == 404:
        message = (
            f"model {name} is not served on /v1/chat/completions: its worker has no chat completions "
            f"(HTTP 404: {said}); /v1/responses serves it"
        )
        return RequestError(message, "model", 404, "model_not_supported")
    if exc.status in (400, 422):
        return RequestError(f"model {name}'s worker refused the request: {said}", param, 400, "worker_refused")
    message = f"model {name}'s worker failed the request (HTTP {exc.status}: {said})"
    return UpstreamError(message, None, 502, "worker_error")


def _event(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


def _name(model: Any) -> str:
    return repr(model) if model is not None else "(the default)"


def _check_field(name: str, value: Any) -> None:
    """A 400 naming `name` when it is no chat-completions parameter, is refused, or has a value not taken."""
    if name not in FIELDS:
        if name in WORKER_ONLY or name.startswith("guided_"):
            message = f"{name!r} is a vLLM template or processor field; this server does not relay it"
            raise RequestError(message, name, 400, "unsupported_parameter")
        raise RequestError(f"Unrecognized request argument supplied: {name}", name, 400, "unknown_parameter")
    status, note = FIELDS[name]
    if status == REFUSED and value is not None:
        raise RequestError(f"{name} is not supported by this server: {note}", name, 400, "unsupported_parameter")
    _VALUES.get(name, _any)(name, value)


def _any(name: str, value: Any) -> None:
    """Fields the worker checks itself (its 4xx is relayed with its status and message)."""


def _messages(name: str, value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise RequestError("messages must be a non-empty list", name)


def _flag(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, bool):
        raise RequestError(f"{name} must be a boolean", name)


def _tokens(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise RequestError(f"{name} must be an integer", name)


def _one(name: str, value: Any) -> None:
    if value not in (None, 1) or isinstance(value, bool):
        raise RequestError("n must be 1: this server makes one choice per completion", name, 400, "unsupported_value")


def _text_only(name: str, value: Any) -> None:
    if value not in (None, ["text"]):
        raise RequestError('modalities must be ["text"]: there is no audio output', name, 400, "unsupported_value")


def _not_stored(name: str, value: Any) -> None:
    _flag(name, value)
    if value:
        raise RequestError("store must be false: chat completions are not stored here", name, 400, "unsupported_value")


def _metadata(name: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise RequestError("metadata must be an object of strings", name)
    try:
        check_metadata(value)
    except ValueError as exc:
        raise RequestError(str(exc), name) from None


def _stream_options(name: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise RequestError("stream_options must be an object", name)
    for key, option in value.items():
        if key not in ("include_usage", "include_obfuscation"):
            raise RequestError(f"Unrecognized stream option: {key}", f"{name}.{key}", 400, "unknown_parameter")
        _flag(f"{name}.{key}", option)


_VALUES = {
    "messages": _messages,
    "stream": _flag,
    "logprobs": _flag,
    "parallel_tool_calls": _flag,
    "max_tokens": _tokens,
    "max_completion_tokens": _tokens,
    "n": _one,
    "modalities": _text_only,
    "store": _not_stored,
    "metadata": _metadata,
    "stream_options": _stream_options,
}
"""The values each field takes beyond its type, where the relay decides rather than the worker."""


def _worker_error(text: str) -> tuple[str, str | None]:
    """The message and `param` of vLLM's error body (OpenAI's shape), else its text and no param."""
    try:
        error = json.loads(text).get("error")
    except (json.JSONDecodeError, AttributeError):
        return text.strip() or "(no body)", None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return text, None
    param = error.get("param")
    return error["message"], param if isinstance(param, str) else None
