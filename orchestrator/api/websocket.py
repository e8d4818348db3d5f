"""Responses WebSocket mode (`responses.connect()` in the openai SDK): `ws(s)://HOST/v1/responses`.

The client sends `response.create` messages (the `POST /v1/responses` body, `stream` implicit, no
`background`); the server answers each with the same events an SSE stream carries, one response after
another. The connection keeps its newest response in memory (as OpenAI's does), so the next
`previous_response_id` continues from it without a store read, and an unstored (`store: false`) one is
continuable for the life of the connection (its tool sessions until idle); older unstored ones are gone.
`generate: false` only prefills the worker's cache (one token generated and discarded).
The key and the per-key rate are checked on the upgrade by the same middleware as HTTP, and a key holds
at most `--max-sockets-per-key` connections (beyond: the upgrade is refused with a 429). Each
`response.create` is one request of the key's rate and one of its running responses, as over HTTP; a
refused request, a `response.create` sent while one is running, or a frame that is binary, over
`--max-body-bytes` or bad JSON (`schema.read_json`), is answered with an `error` event and the
connection stays open. A connection lives at most `LIFETIME_S` (OpenAI's documented 60 minutes).
`response.steer` (input queued into the running response, committed by an automatic successor response)
is not built: it is answered with OpenAI's own refusal, `response.steer.failed` with the code
`steering_not_supported`, carrying the input back so the client can send it in its next `response.create`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import anyio
import structlog
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from starlette.types import Message

from orchestrator.api.deps import Deps
from orchestrator.errors import RequestError, error_response
from orchestrator.guard.limits import LimitExceeded
from orchestrator.persist import Record
from orchestrator.request.schema import ResponsesRequest, check_params, read_json
from orchestrator.responses.service import ResponsesService

log = structlog.get_logger(__name__)
LIFETIME_S = 3600.0
ENVELOPE = ("type", "stream_id", "generate")


class Connection:
    """One socket: at most one running response, and the unstored responses it may continue from."""

    def __init__(self, ws: WebSocket, service: ResponsesService):
        self.ws, self.service = ws, service
        self.kept: dict[str, Record] = {}
        self.running: asyncio.Task[None] | None = None
        self.finished = True  # the running response sent its terminal event (it may still be settling)

    async def send_error(self, exc: BaseException, stream_id: str | None = None) -> None:
        answer = error_response(exc)
        event: dict[str, Any] = {"type": "error", "status": answer.status_code, **json.loads(answer.body)}
        if stream_id is not None:
            event["stream_id"] = stream_id
        await self.ws.send_text(json.dumps(event))

    async def receive(self, frame: Message) -> None:
        """One frame: a text message is handled; a binary one, or one over `--max-body-bytes`, is answered
        with an `error` event and the socket stays open (the client may send the next one)."""
        if frame["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(frame.get("code", 1000), frame.get("reason"))
        text = frame.get("text")
        if text is None:
            return await self.send_error(RequestError("binary messages are not supported: send JSON text"))
        if len(text) > self.service.settings.max_body_bytes:  # characters: at most as many as the bytes
            limit = self.service.settings.max_body_bytes
            return await self.send_error(RequestError(f"the message is larger than {limit} bytes", None, 413))
        await self.handle(text)

    async def handle(self, raw: str) -> None:
        try:
            message = await read_json(raw)
        except RequestError as exc:
            return await self.send_error(exc)
        if isinstance(message, dict) and message.get("type") == "response.steer":
            return await self.refuse_steer(message)
        if not isinstance(message, dict) or message.get("type") != "response.create":
            kind = message.get("type") if isinstance(message, dict) else None
            return await self.send_error(RequestError(f"unsupported client event type {kind!r}", "type"))
        try:
            self.service.limits.rate.admit(self.ws.state.owner)  # each response.create is a request
        except LimitExceeded as exc:
            return await self.send_error(exc, message.get("stream_id"))
        if self.running is not None and self.finished:
            await self.running  # settling is quick; the next response may continue from this one
        elif self.running is not None and not self.running.done():
            error = RequestError(
                "a response is already running on this connection; send the next "
                "response.create after its terminal event",
                "type",
                409,
                "response_in_progress",
            )
            return await self.send_error(error, message.get("stream_id"))
        self.finished = False
        self.running = asyncio.create_task(self.respond(message))

    async def refuse_steer(self, message: dict[str, Any]) -> None:
        """Steering is not supported: the input goes back unapplied, so nothing the client sent is lost."""
        event = {
            "type": "response.steer.failed",
            "sequence_number": 0,  # outside any response's stream: steering events have no stream of their own
            "error": {
                "type": "invalid_request_error",
                "code": "steering_not_supported",
                "message": "response.steer is not supported by this server; send the input in the next "
                "response.create (with previous_response_id) after the running response's terminal event",
            },
            "steer": {"input": message.get("input"), "previous_response_id": message.get("previous_response_id")},
        }
        await self.ws.send_text(json.dumps(event))

    async def respond(self, message: dict[str, Any]) -> None:
        stream_id = message.get("stream_id")
        try:
            body = {k: v for k, v in message.items() if k not in ENVELOPE}
            check_params(body)  # as over HTTP: an unknown or refused parameter is an error, never ignored
            if body.pop("stream", True) is not True:  # implicit; Codex sends `true` anyway
                raise RequestError("every response streams over WebSocket: 'stream' must be true or absent", "stream")
            if body.pop("background", False) is not False:
                raise RequestError("'background' is not supported over WebSocket", "background")
            generate = message.get("generate", True)
            if not isinstance(generate, bool):
                raise RequestError("generate must be a boolean", "generate")
            req = ResponsesRequest.model_validate({**body, "stream": True})
            live = await self.service.create(
                req, self.ws.state.owner, kept=self.kept, warm_only=not generate, base_url=_http_base(self.ws)
            )
        except Exception as exc:
            self.finished = True
            return await self.send_error(exc, stream_id)
        try:
            async for event in live.builder.follow():
                self.finished = live.builder.finished
                await self.ws.send_text(json.dumps(event if stream_id is None else {**event, "stream_id": stream_id}))
        finally:
            if not live.builder.finished and live.task is not None:
                live.task.cancel()  # the socket went away: abort the generation, as an SSE client's close does
            await live.done.wait()
            if live.record is not None:  # only the newest, stored or not: the next turn skips the store read
                self.kept = {live.record.id: live.record}

    async def close(self) -> None:
        if self.running is not None:
            self.running.cancel()
            with contextlib.suppress(BaseException):
                await self.running


def router(deps: Deps) -> APIRouter:
    """`/v1/responses` as a WebSocket endpoint."""
    service = deps.service
    router = APIRouter()

    @router.websocket("/v1/responses")
    async def responses_socket(ws: WebSocket) -> None:
        try:
            held = service.limits.sockets.take(ws.state.owner)
        except LimitExceeded as exc:
            return await _refuse_upgrade(ws, error_response(exc))
        conn = Connection(ws, service)
        try:
            await ws.accept()
            with anyio.move_on_after(LIFETIME_S):
                while True:
                    await conn.receive(await ws.receive())
            await conn.send_error(
                RequestError(
                    "the connection reached its 60-minute limit; open a new one",
                    None,
                    400,
                    "websocket_connection_limit_reached",
                )
            )
            await ws.close(1000)
        except WebSocketDisconnect:
            log.info("websocket.closed")
        finally:
            held.release()
            await conn.close()

    return router


async def _refuse_upgrade(ws: WebSocket, answer: JSONResponse) -> None:
    """The upgrade answered with an HTTP error (OpenAI's body), or, where the server cannot send one, closed
    with a policy-violation code and the error's message as the reason."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        return await ws.send_denial_response(answer)
    await ws.close(1008, json.loads(answer.body)["error"]["message"])


def _http_base(ws: WebSocket) -> str:
    """The connection's base URL as HTTP (links in responses are fetched over HTTP)."""
    return str(ws.base_url.replace(scheme="https" if ws.url.scheme == "wss" else "http"))
