"""`POST /v1/chat/completions`: the body checked and relayed to the workers by `chat.completions.ChatRelay`,
each completion holding one of its key's running slots until its last chunk."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from orchestrator.api.deps import Deps
from orchestrator.api.responses import SSE_OR_JSON
from orchestrator.chat.completions import ChatRelay
from orchestrator.guard.limits import Slot
from orchestrator.request.schema import read_json


class _HeldStream(StreamingResponse):
    """A streamed answer that gives its slot back and closes the worker's stream once the response is over,
    however it ends (even when the client leaves before the first chunk, and the body is never iterated)."""

    def __init__(self, content: AsyncIterator[str], slot: Slot, close: Callable[[], Awaitable[None]]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self.slot, self.close = slot, close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()
            await self.close()


def router(deps: Deps) -> APIRouter:
    """The relay route, over the app's worker pool and its running limit. It answers the completion (JSON, or a
    stream); 400 for a body the relay does not take, 429 past the key's running limit (the slot is taken before
    the first await). (No docstring on the route itself: FastAPI would publish it in the OpenAPI document.)"""
    settings = deps.settings
    relay = ChatRelay(deps.pool, max_output_tokens=settings.max_output_tokens, context_tokens=settings.context_tokens)
    running = deps.service.limits.running
    router = APIRouter()

    @router.post("/v1/chat/completions", openapi_extra={"responses": SSE_OR_JSON})
    async def chat_completions(request: Request) -> Response:
        sent = relay.checked(await read_json(await request.body()))
        slot = running.take(request.state.owner)
        if sent.get("stream"):
            try:  # the worker's verdict before the response begins: a refusal is an HTTP error, as OpenAI's
                events, close = await relay.opened(sent)
            except BaseException:
                slot.release()
                raise
            return _HeldStream(events, slot, close)
        with slot:
            return JSONResponse(await relay.complete(sent))

    return router
