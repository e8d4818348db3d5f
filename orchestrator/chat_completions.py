"""`POST /v1/chat/completions`, relayed to the workers, for clients whose default is chat completions.

The body goes to a worker as it is (vLLM validates and honours its fields) with `model` replaced by the
worker's own name, through the same pool as the Responses path: balancing, retry on another worker before
the first delta, health. The caller's key, rate and running limit apply as on `/v1/responses`: a relayed
completion holds one of the key's running slots until its last chunk. The built-in tools (web search, code
interpreter, MCP) live on `/v1/responses` only: a chat completion is one generation of the model, tools
included, and its tool calls are the client's to run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import structlog
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from orchestrator.limits import Slot, Slots
from orchestrator.schema import RequestError
from orchestrator.worker.client import WorkerError, WorkerPool, WorkerRefused, WorkerUnavailable

log = structlog.get_logger(__name__)


class UpstreamError(RequestError):
    """The workers could not serve the completion: 502/503 with OpenAI's `server_error` type."""

    etype = "server_error"


class _HeldStream(StreamingResponse):
    """A streamed answer that gives its slot back once the response is over, however it ends (even when
    the client leaves before the first chunk, and the body is never iterated)."""

    def __init__(self, content: AsyncIterator[str], slot: Slot) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()


class ChatRelay:
    """Relays chat completions for one app, each holding one of its key's `running` slots."""

    def __init__(self, pool: WorkerPool | None, running: Slots) -> None:
        self.pool = pool
        self.running = running

    async def answer(self, body: Any, owner: str) -> Response:
        """The completion (JSON, or a stream); 400 for a body this relay does not take, 429 past the key's
        running limit (the slot is taken before the first await)."""
        sent = self.checked(body)
        slot = self.running.take(owner)
        if sent.get("stream"):
            return _HeldStream(self.stream(sent), slot)
        with slot:
            return JSONResponse(await self.complete(sent))

    def checked(self, body: Any) -> dict[str, Any]:
        """The checked body; a 400 for what is not a chat completion request."""
        if self.pool is None:
            raise UpstreamError("this orchestrator has no worker pool to relay chat completions to", None, 503)
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            raise RequestError("messages must be a non-empty list", "messages")
        if not isinstance(body.get("stream", False), bool):
            raise RequestError("stream must be a boolean", "stream")
        return body

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """A non-streaming completion: the worker's answer, with the caller's model name."""
        async for answer in self._relay(body, stream=False):
            return answer
        raise UpstreamError("the worker sent no answer", None, 502)

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[str]:
        """The worker's chunks as Server-Sent Events; a failure after the first chunk is an error chunk."""
        try:
            async for chunk in self._relay(body, stream=True):
                yield f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"
        except RequestError as exc:
            error = {"message": str(exc), "type": exc.etype, "param": exc.param, "code": exc.code}
            yield f"data: {json.dumps({'error': error})}\n\n"
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
            raise RequestError(_worker_message(exc.text), None, exc.status) from None
        except WorkerUnavailable as exc:
            raise UpstreamError(str(exc), None, 503, "worker_unavailable") from None
        except WorkerError as exc:
            log.warning("chat.relay_failed", error=str(exc))
            raise UpstreamError(str(exc), None, 502, "worker_error") from None


def _worker_message(text: str) -> str:
    """The message of vLLM's error body (OpenAI's shape), else its text."""
    try:
        error = json.loads(text).get("error")
    except (json.JSONDecodeError, AttributeError):
        return text
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else text
