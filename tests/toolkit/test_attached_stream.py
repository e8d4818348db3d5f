"""The attached stream's demultiplexing, against a socket pair standing in for the engine (no Docker needed)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from toolkit.sandbox.stream import AttachedStream


def frame(kind: int, payload: bytes) -> bytes:
    """One frame of Docker's multiplexed stream: kind (1 stdout, 2 stderr), three zero bytes, the size."""
    return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


async def engine_and_stream(limit: int = 1024) -> tuple[socket.socket, AttachedStream]:
    ours, engine = socket.socketpair()
    return engine, await AttachedStream.open("c" * 64, ours, limit)


async def send_bytewise(engine: socket.socket, data: bytes) -> None:
    """Byte by byte, yielding between, so every frame header and body arrives cut."""
    for i in range(len(data)):
        engine.send(data[i : i + 1])
        await asyncio.sleep(0)


async def test_stdout_frames_cut_anywhere_reach_the_reader_whole_and_stderr_frames_do_not() -> None:
    engine, stream = await engine_and_stream()
    data = frame(1, b'{"ready": true}\n') + frame(2, b"a warning\n") + frame(1, b"one ") + frame(1, b"line\n")
    await send_bytewise(engine, data)
    engine.close()
    assert await stream.reader.read() == b'{"ready": true}\none line\n'
    stream.close()


async def test_a_diverted_stream_hands_over_whole_lines_and_its_reader_sees_only_the_end() -> None:
    engine, stream = await engine_and_stream()
    lines: list[bytes] = []
    stream.divert(lines.append)
    await send_bytewise(engine, frame(1, b"first\nsec") + frame(2, b"noise") + frame(1, b"ond\nthird\n"))
    engine.close()
    assert await stream.reader.read() == b""
    assert lines == [b"first\n", b"second\n", b"third\n"]
    stream.close()


async def test_a_diverted_line_over_the_limit_ends_the_stream_with_an_error() -> None:
    engine, stream = await engine_and_stream(limit=16)
    lines: list[bytes] = []
    stream.divert(lines.append)
    engine.send(frame(1, b"short\n" + b"x" * 40))
    with pytest.raises(ValueError, match="longer than 16 bytes"):
        await asyncio.wait_for(stream.reader.read(), 5)
    assert lines == [b"short\n"]
    engine.close()
    stream.close()
