"""The task store in process: a task past its ttl is removed and read as unknown, its work cancelled if it still
runs; an owner past its limit is refused, unless a task whose end it already read makes room."""

from __future__ import annotations

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from toolkit.tasks import TaskStore
from toolkit.wire import unknown_task


async def _wait_forever() -> dict[str, str]:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def test_an_expired_task_reads_as_unknown_and_its_work_is_cancelled() -> None:
    store = TaskStore("ab" * 8, ttl_s=0.2, max_per_owner=4, poll_ms=100)
    stopped = anyio.Event()

    async def work() -> dict[str, str]:
        try:
            return await _wait_forever()
        finally:
            stopped.set()

    async with store.running():
        task = store.create("alice", "python", work)
        assert store.get(task.id, "alice") is task
        with anyio.fail_after(10):
            await stopped.wait()  # the store's expiry loop cancelled it
        with pytest.raises(MCPError) as refused:
            store.get(task.id, "alice")
    assert refused.value.error.message == unknown_task(task.id) and task.status == "cancelled"


async def test_an_owner_past_its_limit_is_refused_and_others_are_not() -> None:
    store = TaskStore("cd" * 8, ttl_s=60, max_per_owner=2, poll_ms=100)
    async with store.running():
        held = [store.create("alice", "python", _wait_forever) for _ in range(2)]
        with pytest.raises(MCPError, match="holds 2 tasks on this replica, its limit"):
            store.create("alice", "python", _wait_forever)
        assert store.create("bob", "python", _wait_forever).owner == "bob"
    assert {t.status for t in held} == {"cancelled"}  # the server's stop cancels what still runs


async def test_an_owner_at_its_limit_gets_the_place_of_a_task_whose_end_it_read() -> None:
    store = TaskStore("ef" * 8, ttl_s=60, max_per_owner=2, poll_ms=100)

    async def quick() -> dict[str, str]:
        return {"done": "yes"}

    async with store.running():
        ended = store.create("alice", "python", quick)
        store.create("alice", "python", _wait_forever)
        with anyio.fail_after(10):
            await ended.ended.wait()
        with pytest.raises(MCPError, match="its limit"):  # ended, but its caller has not read it yet
            store.create("alice", "python", _wait_forever)
        assert store.detailed(store.get(ended.id, "alice"))["status"] == "completed"
        assert store.create("alice", "python", _wait_forever).owner == "alice"  # took the read one's place
        with pytest.raises(MCPError, match="its limit"):  # the running ones are never dropped
            store.create("alice", "python", _wait_forever)
        with pytest.raises(MCPError):
            store.get(ended.id, "alice")
