"""Raw HTTP/1.1 for tests that send what a polite client would not: any path spelling as is, and a legacy SSE
stream that is read only when the test says (httpx normalises paths, and reads streams into its own buffers)."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any


def request(port: int, method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, Any]:
    """One request with its path sent byte for byte; the status and the body (parsed when JSON)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={k.replace("_", "-"): v for k, v in headers.items()})
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data


class SseStream:
    """`GET /{ns}/sse` on a socket of its own: `endpoint` is the path to POST to; `event` reads the next event."""

    def __init__(self, port: int, ns: str, *, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket()
        if rcvbuf is not None:  # a small receive window: a reader that does not read fills the sender's side
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(30)
        self.sock.connect(("127.0.0.1", port))
        self.sock.sendall(f"GET /{ns}/sse HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode())
        self._buf = b""
        answer = self._until(b"\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200"), answer
        self.chunked = b"transfer-encoding: chunked" in answer.lower()
        self._events = b""
        """Event bytes already out of their chunks, not yet read as events."""
        endpoint = self.event()
        assert endpoint["event"] == "endpoint", endpoint
        self.endpoint = "/" + endpoint["data"].split("/", 3)[3]

    def _until(self, mark: bytes) -> bytes:
        while mark not in self._buf:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the gateway closed the stream")
            self._buf += data
        head, _, self._buf = self._buf.partition(mark)
        return head

    def _chunk(self) -> bytes:
        size = int(self._until(b"\r\n").split(b";")[0], 16)
        while len(self._buf) < size + 2:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the gateway closed the stream")
            self._buf += data
        chunk, self._buf = self._buf[:size], self._buf[size + 2 :]
        return chunk

    def event(self) -> dict[str, str]:
        """The next event that is not a comment: its fields (`event`, `data`)."""
        while True:
            raw = self._event_bytes()
            fields = dict(line.split(": ", 1) for line in raw.decode().split("\n") if line and ": " in line)
            if fields and not raw.startswith(b":"):
                return fields

    def _event_bytes(self) -> bytes:
        if not self.chunked:
            return self._until(b"\n\n")
        pending = self._events
        while b"\n\n" not in pending:
            pending += self._chunk()
        event, _, self._events = pending.partition(b"\n\n")
        return event

    def message(self) -> dict[str, Any]:
        """The next JSON-RPC message on the stream."""
        return json.loads(self.event()["data"])

    def close(self) -> None:
        self.sock.close()
