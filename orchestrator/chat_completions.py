"""`POST /v1/chat/completions`, relayed to the workers, for clients whose default is chat completions.

The body goes to a worker as it is (vLLM validates and honours its fields) with `model` replaced by the
worker's own name, through the same pool as the Responses path: balancing, retry on another worker before
the first delta, health. The caller's key, rate and concurrency limits apply as on `/v1/responses`. The
built-in tools (web search, code interpreter, MCP) live on `/v1/responses` only: a chat completion is one
generation of the model, tools included, and its tool calls are the client's to run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import structlog

from orchestrator.addresses import hide, worker_roles
from orchestrator.limits import check_running
from orchestrator.schema import RequestError
from orchestrator.worker.client import WorkerError, WorkerPool, WorkerRefused, WorkerUnavailable

log = structlog.get_logger(__name__)


class UpstreamError(RequestError):
    """The workers could not serve the completion: 502/503 with OpenAI's `server_error` type."""

    etype = "server_error"


class ChatRelay:
    """Relays chat completions for one app; counts each key's relays in flight for its concurrency limit."""

    def __init__(self, pool: WorkerPool | None, max_concurrent_per_key: int) -> None:
        self.pool = pool
        self.max_concurrent = max_concurrent_per_key
        self.running: Counter[str] = Counter()
        self.roles = worker_roles([w.url for w in pool.workers] if pool is not None else [])

    def admit(self, body: Any, owner: str, responses_running: int) -> dict[str, Any]:
        """The checked body; a 400 for what is not a chat completion request, a 429 past the key's limit."""
        if self.pool is None:
            raise UpstreamError("this orchestrator has no worker pool to relay chat completions to", None, 503)
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise RequestError("messages must be a non-empty list", "messages")
        if not isinstance(body.get("stream", False), bool):
            raise RequestError("stream must be a boolean", "stream")
        check_running(self.running[owner] + responses_running, self.max_concurrent)
        return body

    async def complete(self, body: dict[str, Any], owner: str) -> dict[str, Any]:
        """A non-streaming completion: the worker's answer, with the caller's model name."""
        async for answer in self._relay(body, owner, stream=False):
            return answer
        raise UpstreamError("the worker sent no answer", None, 502)

    async def stream(self, body: dict[str, Any], owner: str) -> AsyncIterator[str]:
        """The worker's chunks as Server-Sent Events; a failure after the first chunk is an error chunk."""
        try:
            async for chunk in self._relay(body, owner, stream=True):
                yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"
        except RequestError as exc:
            error = {"message": str(exc), "type": exc.etype, "param": exc.param, "code": exc.code}
            yield f"data: {json.dumps({'error': error})}\n\n"
        yield "data: [DONE]\n\n"

    async def _relay(self, body: dict[str, Any], owner: str, *, stream: bool) -> AsyncIterator[dict[str, Any]]:
        assert self.pool is not None
        asked = body.get("model")
        self.running[owner] += 1
        try:
            async for obj in self.pool.relay_chat(body, stream=stream):
                if asked is not None:
                    obj["model"] = asked
                yield obj
        except WorkerRefused as exc:
            raise RequestError(_worker_message(exc.text), None, exc.status) from None
        except WorkerUnavailable as exc:
            log.warning("chat.relay_unavailable", error=str(exc))
            raise UpstreamError(hide(str(exc), self.roles), None, 503, "worker_unavailable") from None
        except WorkerError as exc:
            log.warning("chat.relay_failed", error=str(exc))
            raise UpstreamError(hide(str(exc), self.roles), None, 502, "worker_error") from None
        finally:
            self.running[owner] -= 1
            if not self.running[owner]:
                del self.running[owner]


def _worker_message(text: str) -> str:
    """The message of vLLM's error body (OpenAI's shape), else its text."""
    try:
        error = json.loads(text).get("error")
    except (json.JSONDecodeError, AttributeError):
        return text
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else text
