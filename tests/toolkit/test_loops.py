"""A background loop that ends makes /healthz fail, in the gateway and in every tool server."""

from __future__ import annotations

import threading
import time

import anyio
import httpx
from mcp.server.mcpserver import MCPServer

from gateway.app import build_app
from gateway.config import GatewayConfig
from gateway.lifecycle import build_gateway
from tests.support.asgi import serve_asgi
from toolkit.loops import Loops
from toolkit.server import ToolServer
from toolkit.settings import ToolServerSettings


class _State:
    async def aclose(self) -> None:
        pass


async def _new_state(key: str) -> _State:
    return _State()


async def test_a_loop_that_raises_or_returns_is_recorded_and_a_cancelled_one_is_not() -> None:
    loops = Loops()

    async def broken() -> None:
        raise TimeoutError("redis timed out")

    async def done() -> None:
        return None

    async with anyio.create_task_group() as tg:
        loops.start(tg, "broken", broken)
        loops.start(tg, "done", done)
        loops.start(tg, "forever", anyio.sleep_forever)
        await anyio.wait_all_tasks_blocked()  # two have ended, the third waits forever
        tg.cancel_scope.cancel()  # shutdown: not a death
    assert loops.dead == {"broken": "TimeoutError", "done": "returned"}
    assert loops.health() == (503, {"status": "failing", "dead_loops": loops.dead})
    assert Loops().health() == (200, {"status": "ok"})


def _health_once_failing(base: str) -> httpx.Response:
    deadline = time.monotonic() + 5
    while (health := httpx.get(f"{base}/healthz", trust_env=False)).status_code != 503 and time.monotonic() < deadline:
        time.sleep(0.05)
    return health


def test_the_gateway_healthz_fails_when_one_of_its_loops_died() -> None:
    gw = build_gateway(GatewayConfig())
    broke = threading.Event()  # set from the test's thread, seen by the server's loop

    async def watcher() -> None:
        await anyio.to_thread.run_sync(broke.wait, abandon_on_cancel=True)
        raise RuntimeError("config watch broke")

    gw.background["config-watch"] = watcher
    with serve_asgi(build_app(gw)) as base:
        assert httpx.get(f"{base}/healthz", trust_env=False).json() == {"status": "ok"}
        broke.set()
        health = _health_once_failing(base)
        assert health.json() == {
            "status": "failing",
            "dead_loops": {"config-watch": "RuntimeError"},
        }
        # It still answers calls meanwhile: failing /healthz asks to be replaced, it does not stop serving.
        assert httpx.get(f"{base}/readyz", trust_env=False).status_code in (200, 503)


def test_a_tool_server_healthz_fails_when_its_reaper_died() -> None:
    server: ToolServer = ToolServer(MCPServer("probe"), ToolServerSettings(reap_interval_s=0.05), _new_state)

    async def broken_reap() -> int:
        raise OSError("engine gone")

    server.sessions.reap_idle = broken_reap  # type: ignore[method-assign]
    with serve_asgi(server.build_app()) as base:
        body = _health_once_failing(base).json()
    assert body["status"] == "failing" and body["dead_loops"] == {"reaper": "OSError"}
