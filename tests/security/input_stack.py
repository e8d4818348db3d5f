"""The orchestrator the `test_orch_input_*` modules send bad input to: one per module, over real HTTP.

A real orchestrator app on a loopback port (or on every address, to be reached from a non-loopback one) in
front of the SCRIPTED stand-in worker; no tool servers; responses in memory, files in a scratch directory.
`send` speaks HTTP/1.1 over a bare socket, so a test can declare any `Content-Length`, stream a chunked body
and read an answer the server sends before the body is all there.
"""

from __future__ import annotations

import contextlib
import json
import socket
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from orchestrator.app import create_app
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.worker.scripted import Scenario, ScriptedModel
from orchestrator.worker.scripted import build_app as build_worker
from tests.support.asgi import serve_asgi

ANSWER_TIMEOUT_S = 10.0
"""How long `send` waits for an answer: a bound so that a server that never answers fails the test."""


@dataclass
class Stack:
    url: str
    model: ScriptedModel
    app: Any
    files_dir: Path

    @property
    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="test", max_retries=0, timeout=ANSWER_TIMEOUT_S)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def script(self, rules: list[tuple[str, str]], **extra: Any) -> None:
        rows = [{"match": match, "reply": reply, **extra} for match, reply in rules]
        self.model.scenario = Scenario.from_dict({"rules": rows})


@contextlib.contextmanager
def orchestrator(host: str = "127.0.0.1", **overrides: Any) -> Iterator[Stack]:
    """An orchestrator with `overrides` for its settings, and the scripted worker behind it."""
    model = ScriptedModel(Scenario())
    with (
        serve_asgi(build_worker(model)) as worker_url,
        tempfile.TemporaryDirectory(prefix="toolfleet-input-") as scratch,
    ):
        values: dict[str, Any] = {
            "worker_urls": [worker_url],
            "tools_url": None,
            "date": "2026-12-02",
            "health_interval_s": 0.5,
            "store_path": f"{scratch}/store.sqlite3",
            "files_dir": f"{scratch}/files",
            **overrides,
        }
        app = create_app(OrchestratorSettings(**values), stores=SQLiteStores())
        with serve_asgi(app, host=host) as url:
            yield Stack(url.replace("0.0.0.0", "127.0.0.1"), model, app, Path(scratch) / "files")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict[str, Any]:
        return self.json()["error"]


def send(
    port: int,
    method: str,
    path: str,
    body: bytes | Iterable[bytes] = b"",
    *,
    headers: dict[str, str] | None = None,
    host: str = "127.0.0.1",
) -> Answer:
    """One request on a new connection: `body` as bytes goes with its `Content-Length` (unless `headers` name
    one), as an iterable of chunks it is sent chunked; chunks stop once the server has answered or closed."""
    fields = {"host": f"{host}:{port}", "content-type": "application/json", "connection": "close"}
    chunked = not isinstance(body, bytes)
    fields.update({"transfer-encoding": "chunked"} if chunked else {"content-length": str(len(body))})
    fields.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    with socket.create_connection((host, port), timeout=ANSWER_TIMEOUT_S) as sock:
        sock.sendall(head.encode())
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if isinstance(body, bytes):
                sock.sendall(body)
            else:
                for chunk in body:
                    if _answered(sock):
                        break
                    sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                else:
                    sock.sendall(b"0\r\n\r\n")
        return _read_answer(sock)


def _answered(sock: socket.socket) -> bool:
    """Whether the server has written something back (or closed) already: peeked, not consumed."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)  # some bytes, or b"" for a close: either way it has answered
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)
        sock.settimeout(ANSWER_TIMEOUT_S)


def _read_answer(sock: socket.socket) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        got = sock.recv(65536)
        if not got:
            raise ConnectionError(f"the server closed the connection without an answer: {data!r}")
        data += got
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        got = sock.recv(65536)
        if not got:
            break
        rest += got
    return Answer(int(status_line.split()[1]), headers, rest[:length])


def json_of_size(size: int, field: str = "pad") -> bytes:
    """A JSON object `{field: "xxx..."}` of exactly `size` bytes (at least the empty string's)."""
    empty = json.dumps({field: ""}).encode()
    return json.dumps({field: "x" * max(0, size - len(empty))}).encode()


def chunks(data: bytes, size: int = 16 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]
