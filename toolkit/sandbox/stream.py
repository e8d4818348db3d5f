"""A started container's attached stdin/stdout, with Docker's multiplexed frames split as they arrive."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class _Demux(asyncio.StreamReaderProtocol):
    """Docker's multiplexed attach stream (an 8-byte header - kind, size - before each frame), split as the bytes
    arrive: stdout frames go straight into the reader (or, once diverted, line by line to a callback), stderr
    frames are logged.

    Why in `data_received` rather than a task reading a raw reader: a reply then wakes its reader once, not
    once for the task and again for the reader it feeds (a loop turn per call on every warm sandbox call)."""

    def __init__(self, reader: asyncio.StreamReader, container_id: str, limit: int) -> None:
        super().__init__(reader)
        self._out = reader
        self._container_id = container_id
        self._limit = limit
        self._pending = bytearray()
        self._line = bytearray()
        self._link: asyncio.BaseTransport | None = None
        self.on_line: Callable[[bytes], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._link = transport

    def data_received(self, data: bytes) -> None:
        buf = self._pending
        buf += data
        start = 0
        while len(buf) - start >= 8:
            end = start + 8 + int.from_bytes(buf[start + 4 : start + 8], "big")
            if end > len(buf):
                break
            payload = bytes(buf[start + 8 : end])
            if buf[start] != 1:
                text = payload[:2000].decode("utf-8", "replace")
                log.warning("sandbox.stderr", container=self._container_id[:12], text=text)
            elif self.on_line is None:
                self._out.feed_data(payload)
            else:
                self._lines(payload, self.on_line)
            start = end
        del buf[:start]

    def _lines(self, payload: bytes, on_line: Callable[[bytes], None]) -> None:
        """Each whole line to `on_line`; a line longer than the limit ends the stream with an error (as the
        reader's `readline` would fail on it)."""
        line = self._line
        line += payload
        start = 0
        while (end := line.find(b"\n", start)) >= 0:
            on_line(bytes(line[start : end + 1]))
            start = end + 1
        del line[:start]
        if len(line) > self._limit:
            self._out.set_exception(ValueError(f"a line longer than {self._limit} bytes"))
            if self._link is not None:
                self._link.close()


class AttachedStream:
    """A started container's attached stdin/stdout: stdout frames feed `reader`, stderr frames are logged."""

    def __init__(
        self, container_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, demux: _Demux
    ) -> None:
        self.container_id = container_id
        self.reader = reader
        self.writer = writer
        self._demux = demux

    @classmethod
    async def open(cls, container_id: str, sock: socket.socket, limit: int) -> AttachedStream:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=limit, loop=loop)
        transport, demux = await loop.create_connection(lambda: _Demux(reader, container_id, limit), sock=sock)
        return cls(container_id, reader, asyncio.StreamWriter(transport, demux, reader, loop), demux)

    def divert(self, on_line: Callable[[bytes], None]) -> None:
        """From now on hand each stdout line to `on_line` as it arrives, in the loop's callback, instead of
        the reader, which then sees only the stream's end (or the error that ended it).

        Why: a channel with many requests in flight otherwise needs a task that reads lines and hands each
        to its caller - one more loop turn on every reply. Call it only once nothing unread is left in the
        reader (after a ready line, before the first request)."""
        self._demux.on_line = on_line

    def close(self) -> None:
        self.writer.close()
