"""`run_service`, the start every entrypoint shares, in a real subprocess on a loopback port (one for the module:
the last test stops it)."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator

import httpx
import pytest

from tests.support.service import Service, running_service

_DATA_SEGS_IN = 152
"""Offset of `tcpi_data_segs_in` (segments that carried data) in Linux's `struct tcp_info`."""


@pytest.fixture(scope="module")
def svc() -> Iterator[Service]:
    with running_service(["-m", "tests.support.plain_service", "--log-level", "INFO"]) as service:
        yield service


def _data_segments_in(conn: socket.socket) -> int:
    return int(struct.unpack_from("I", conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), _DATA_SEGS_IN)[0])


def _read_until(conn: socket.socket, end: bytes) -> bytes:
    """What the connection carries up to `end` (the socket's timeout turns a lost answer into an error)."""
    got = b""
    while end not in got:
        part = conn.recv(4096)
        assert part, f"connection closed after {got!r}"
        got += part
    return got


def test_an_answer_ready_with_its_head_leaves_in_one_tcp_segment(svc: Service) -> None:
    """uvicorn writes the head and the body apart (two segments: a client woken by the head waits again for the
    body); the kit's protocol sends them together, request after request on one keep-alive connection."""
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as conn:
        for _ in range(5):
            before = _data_segments_in(conn)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n")
            assert _read_until(conn, b"\r\n\r\nok").startswith(b"HTTP/1.1 200 OK\r\n")
            assert _data_segments_in(conn) - before == 1


def test_a_stream_sends_its_head_and_first_part_before_it_ends_and_a_head_answer_its_head(svc: Service) -> None:
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as conn:
        conn.sendall(b"GET /stream HTTP/1.1\r\nhost: test\r\n\r\n")
        got = _read_until(conn, b"first\n")
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked" in got
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as conn:
        conn.sendall(b"HEAD /healthz HTTP/1.1\r\nhost: test\r\n\r\n")  # content-length: 2, and no body
        got = _read_until(conn, b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 2\r\n" in got


def test_run_service_logs_json_from_the_build_on_and_shuts_down_gracefully(svc: Service) -> None:
    """Last in the module: it stops the module's service."""
    assert httpx.get(f"{svc.url}/healthz").text == "ok"
    assert svc.stop() == -15  # uvicorn re-raises SIGTERM once it has shut down gracefully
    log = svc.log()
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    built = [e for e in events if e.get("event") == "plain.built"]
    assert built and built[0]["port"] == svc.port and built[0]["service"] == "plain", log
    assert any("Finished server process" in e.get("event", "") for e in events), log
