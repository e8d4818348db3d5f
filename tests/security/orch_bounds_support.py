"""What the orchestrator bounds tests share: a worker that holds each generation until the test opens it,
an orchestrator in front of it with many API keys, and a way to wait until a burst has been decided.

The gate makes a burst really overlap without any sleep: every request the orchestrator admits stays at
the worker until `Gate.open`, so the ones refused are refused while the admitted ones are still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.app import create_app
from orchestrator.persist import Stores
from orchestrator.settings import OrchestratorSettings
from orchestrator.worker.scripted import ChatScenario, ScriptedChatModel, build_chat_app
from tests.support.asgi import serve_asgi

KEYS = [f"sk-bounds-{n:02d}" for n in range(64)]
MODEL = "scripted-chat"
GENERATIONS = frozenset({"/v1/chat/completions", "/v1/completions"})


class Gate:
    """A pure-ASGI wrapper around a worker: each generation request waits at the gate until `open`, and
    tells the test's event loop that it arrived (`arrival`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._release = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrivals: asyncio.Queue[None] | None = None

    def close(self) -> None:
        """Hold every generation from now on; arrivals are reported to the calling test's loop."""
        self._loop = asyncio.get_running_loop()
        self._arrivals = asyncio.Queue()
        self._release = threading.Event()

    def open(self) -> None:
        """Let every held generation (and every later one) through."""
        self._release.set()

    async def arrival(self) -> None:
        """Returns when one more generation has reached the worker."""
        assert self._arrivals is not None, "close() the gate first"
        await self._arrivals.get()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in GENERATIONS:
            release, loop, arrivals = self._release, self._loop, self._arrivals
            if loop is not None and arrivals is not None and not release.is_set():
                loop.call_soon_threadsafe(arrivals.put_nowait, None)
            await anyio.to_thread.run_sync(release.wait)
        await self.app(scope, receive, send)


@contextlib.contextmanager
def gated_worker() -> Iterator[tuple[str, Gate, ScriptedChatModel]]:
    """A scripted chat worker (answering "Held and released.") behind an open gate."""
    model = ScriptedChatModel(ChatScenario.from_dict({"default": {"content": "Held and released."}}))
    gate = Gate(build_chat_app(model))
    gate.open()
    with serve_asgi(gate) as url:
        yield url, gate, model


@contextlib.contextmanager
def orchestrator(worker_url: str, stores: Stores | None = None, **overrides: Any) -> Iterator[str]:
    """An orchestrator on the chat path in front of `worker_url`, with `KEYS`, no tool servers; its stores
    are `stores`, else those the settings name."""
    with tempfile.TemporaryDirectory(prefix="toolfleet-bounds-") as scratch:
        values: dict[str, Any] = {
            "worker_urls": [worker_url],
            "worker_api": "chat",
            "tools_url": "",
            "api_keys": KEYS,
            "health_interval_s": 0.5,
            "store_path": f"{scratch}/store.sqlite3",
            "files_dir": f"{scratch}/files",
            **overrides,
        }
        with serve_asgi(create_app(OrchestratorSettings(**values), stores=stores)) as url:
            yield url


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def decided(
    gate: Gate, tasks: list[asyncio.Task[Any]], refused: Callable[[Any], bool], timeout_s: float = 30
) -> tuple[int, int]:
    """Wait until every request of a burst is either refused (its task ended and `refused` says so) or
    held at the worker; returns (held, refused). `timeout_s` only bounds a test that would hang."""
    held = n_refused = 0
    pending: set[asyncio.Future[Any]] = set(tasks)
    arrival = asyncio.ensure_future(gate.arrival())
    try:
        while held + n_refused < len(tasks):
            done, _ = await asyncio.wait({*pending, arrival}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                raise AssertionError(f"burst undecided: {held} held, {n_refused} refused of {len(tasks)}")
            if arrival in done:
                held += 1
                arrival = asyncio.ensure_future(gate.arrival())
            for task in done & pending:
                pending.discard(task)
                n_refused += bool(refused(task.result()))
    finally:
        arrival.cancel()
    return held, n_refused


async def burst(
    gate: Gate, n: int, request: Callable[[], Awaitable[Any]], refused: Callable[[Any], bool]
) -> tuple[int, int, list[Any]]:
    """`n` requests at once, the worker holding each: how many it held and how many were refused while
    they were held, then every result once the gate opens."""
    gate.close()
    tasks = [asyncio.ensure_future(request()) for _ in range(n)]
    try:
        held, n_refused = await decided(gate, tasks, refused)
    finally:
        gate.open()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    return held, n_refused, results
