"""`text/event-stream` bodies: whole events out of an MCP server's streamed answer.

Streamable HTTP answers a request either as one JSON body or as an event stream that carries
notifications (progress, logging) before the answer; the gateway relays such streams event by
event and the orchestrator's client reads the answer out of them, both through `events`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from toolkit.mcpwire.http import Response


class SseOverflow(Exception):
    """An event grew past the parser's limit without ending: the stream is refused, not buffered on."""


class SseParser:
    """Incremental `text/event-stream` parser: feed bytes, get whole events (CRLF normalized to LF)."""

    def __init__(self, limit: int = 16 * 1024 * 1024) -> None:
        self._buf = b""
        self._limit = limit

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk
        hold = buf.endswith(b"\r")
        if hold:
            buf = buf[:-1]
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *events, rest = buf.split(b"\n\n")
        self._buf = rest + (b"\r" if hold else b"")
        if len(self._buf) > self._limit:
            raise SseOverflow("upstream sent an oversized SSE event")
        return events


async def events(body: Response | AsyncIterator[bytes]) -> AsyncIterator[tuple[bytes, bytes | None]]:
    """The one reader of an event stream (a response, or its body's chunks): each whole event as it arrives, with
    its data (None for comments and data-less events). Every SSE consumer (the gateway's relay, legacy bridge and
    probe; the orchestrator's MCP client and its worker streams) reads through it."""
    parser = SseParser()
    async for chunk in body.aiter_bytes() if isinstance(body, Response) else body:
        for event in parser.feed(chunk):
            yield event, event_data(event)


def event_data(event: bytes) -> bytes | None:
    """The `data` of one SSE event (multi-line data joined), or None for comments and data-less events."""
    parts = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(parts) if parts else None


def event_with_data(event: bytes, data: bytes) -> bytes:
    """`event` with its data lines replaced by `data` (one line; JSON has no raw newlines)."""
    lines = [line for line in event.split(b"\n") if not line.startswith(b"data:")]
    return b"\n".join([*lines, b"data: " + data])
