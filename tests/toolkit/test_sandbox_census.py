"""The sandbox census in /metrics (states and memory) and the warm pool's burst, on a real python tool server with
real Docker, plus the pool's accounting against a fake engine (how many starts, how many at once)."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.python_sandbox.conftest import containers_of, require_backend, server_args
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service, wait_until
from toolkit.sandbox.engine import SandboxError
from toolkit.sandbox.pool import WarmPool

MIB = 2**20
SANDBOX_MB = 512  # server_args' --memory-mb


def gauges(server: Service) -> dict[str, float]:
    """The census gauges by name (the sandbox count per state as `sandboxes:<state>`)."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text):
        for sample in family.samples:
            if sample.name == "toolfleet_tool_sandboxes":
                found[f"sandboxes:{sample.labels['state']}"] = sample.value
            elif sample.name.startswith("toolfleet_tool_sandbox_memory"):
                found[sample.name] = sample.value
    return found


def census(server: Service) -> dict[str, float]:
    return {k.removeprefix("sandboxes:"): v for k, v in gauges(server).items() if k.startswith("sandboxes:")}


def health(server: Service) -> str:
    return httpx.get(f"{server.url}/healthz").json()["status"]


async def call(server: Service, session_id: str, tool: str, args: dict[str, str]) -> str:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        return (await session.call_tool(tool, args)).content[0].text


async def test_gauges_follow_sessions_taking_and_releasing_sandboxes() -> None:
    require_backend("docker")
    instance = f"pytest-census-{uuid.uuid4().hex[:8]}"
    with running_service(server_args("docker", instance, "--memory-sample-s", "0.2")) as server:
        idle = {"starting": 0, "warm": 1, "held": 0}
        assert wait_until(lambda: census(server) == idle, 60.0)
        assert gauges(server)["toolfleet_tool_sandbox_memory_limit_bytes"] == SANDBOX_MB * MIB

        sid = f"census-{uuid.uuid4().hex[:8]}"
        assert await call(server, sid, "python", {"code": "len(bytearray(64 * 2**20))"}) == str(64 * MIB)
        assert wait_until(lambda: census(server) == {"starting": 0, "warm": 1, "held": 1}, 60.0)  # the pool refilled
        assert gauges(server)["toolfleet_tool_sandbox_memory_limit_bytes"] == 2 * SANDBOX_MB * MIB
        assert wait_until(lambda: gauges(server)["toolfleet_tool_sandbox_memory_used_bytes"] > 0, 60.0)

        await call(server, sid, "cleanup_session", {})
        assert census(server) == idle
        assert gauges(server)["toolfleet_tool_sandbox_memory_limit_bytes"] == SANDBOX_MB * MIB
        assert health(server) == "ok"  # the sampler loop runs
    assert containers_of(instance) == []


async def test_a_burst_of_new_sessions_beyond_the_pool_is_served_and_the_pool_keeps_its_size() -> None:
    require_backend("docker")
    instance = f"pytest-burst-{uuid.uuid4().hex[:8]}"
    burst = server_args("docker", instance, "--pool-burst", "4", "--max-sessions", "12", "--memory-sample-s", "0")
    with running_service(burst) as server:
        assert wait_until(lambda: census(server)["warm"] == 1, 60.0)
        ids = [f"burst-{i}-{uuid.uuid4().hex[:6]}" for i in range(12)]
        answers = await asyncio.gather(*(call(server, sid, "python", {"code": "6 * 7"}) for sid in ids))
        assert answers == ["42"] * 12
        assert wait_until(lambda: census(server) == {"starting": 0, "warm": 1, "held": 12}, 60.0)
        assert wait_until(lambda: len(containers_of(instance)) == 13, 60.0)  # no start beyond the takers and the pool

        await asyncio.gather(*(call(server, sid, "cleanup_session", {}) for sid in ids))
        assert census(server) == {"starting": 0, "warm": 1, "held": 0}
        assert wait_until(lambda: len(containers_of(instance)) == 1, 60.0)
        assert "toolfleet_tool_sandbox_memory_used_bytes" in gauges(server)  # sampling off: the gauge stays, at 0
    assert containers_of(instance) == []


class FakeSandbox:
    def __init__(self, number: int) -> None:
        self.container_id = f"fake-{number}"
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


class FakeEngine:
    """Starts fake sandboxes, each when the test lets one through, counting how many start at once."""

    def __init__(self) -> None:
        self.started: list[FakeSandbox] = []
        self.running = 0
        self.most_at_once = 0
        self.gate = asyncio.Semaphore(0)
        self.states: dict[str, str] = {}

    async def spawn(self) -> FakeSandbox:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await self.gate.acquire()
        finally:
            self.running -= 1
        sandbox = FakeSandbox(len(self.started))
        self.started.append(sandbox)
        return sandbox

    def mark(self, container_id: str, state: str) -> None:
        self.states[container_id] = state


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_takers_on_an_empty_pool_share_a_burst_of_starts_and_no_more() -> None:
    engine = FakeEngine()
    pool: WarmPool[FakeSandbox] = WarmPool(engine.spawn, 1, engine, burst=3)  # type: ignore[arg-type]
    pool.start()
    takers = [asyncio.create_task(pool.take()) for _ in range(7)]
    await settle()
    assert engine.running == 3  # the refill's start and two more: the burst, not one per taker

    for _ in range(8):
        engine.gate.release()
        await settle()
    taken = await asyncio.gather(*takers)
    assert len({s.container_id for s in taken}) == 7
    assert engine.most_at_once == 3
    assert len(engine.started) == 8 and len(pool) == 1  # seven taken, one warm: nothing started in vain
    assert sorted(engine.states.values()) == ["held"] * 7 + ["warm"]
    await pool.aclose()


async def test_a_taker_that_gives_up_leaves_its_sandbox_to_the_pool_and_a_failure_reaches_a_taker() -> None:
    engine = FakeEngine()
    pool: WarmPool[FakeSandbox] = WarmPool(engine.spawn, 1, engine, burst=2)  # type: ignore[arg-type]
    pool.start()
    quitter = asyncio.create_task(pool.take())
    await settle()
    quitter.cancel()
    engine.gate.release()
    engine.gate.release()
    await settle()
    assert len(pool) == 1 and sum(s.closed for s in engine.started) == len(engine.started) - 1

    async def broken() -> FakeSandbox:
        raise SandboxError("engine down")

    dry: WarmPool[FakeSandbox] = WarmPool(broken, 0, engine, burst=2)  # type: ignore[arg-type]
    dry.start()
    with pytest.raises(SandboxError, match="engine down"):
        await dry.take()
    await dry.aclose()
    await pool.aclose()
