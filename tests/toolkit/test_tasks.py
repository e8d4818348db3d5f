"""The task store in process: a task past its ttl is removed and read as unknown, its work cancelled if it still
runs; an owner running its limit is refused, on one replica or, with Redis, across replicas, where a dead
replica's places lapse; a task asks its client for input and waits for `tasks/update`; a drain waits for tasks
and fails the ones left at its deadline."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest
import redis
from mcp.shared.exceptions import MCPError

from tests.support.gateway import eventually
from tests.support.redis import redis_server
from toolkit.drain import DRAINED_CODE, Drain
from toolkit.task_counts import KEY, FleetCounts
from toolkit.tasks import CURRENT_TASK, TaskStore, ask, cancelled_task
from toolkit.wire import unknown_task


async def _wait_forever() -> dict[str, str]:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


async def test_an_expired_task_reads_as_unknown_and_its_work_is_cancelled() -> None:
    store = TaskStore("ab" * 8, ttl_s=0.2, max_per_owner=4, poll_ms=100)
    stopped = anyio.Event()
    killed: list[bool] = []

    async def work() -> dict[str, str]:
        try:
            return await _wait_forever()
        finally:
            killed.append(cancelled_task())  # what makes `ToolServer.session` close the sandbox
            stopped.set()

    async with store.running():
        finished = await store.create("alice", "python", lambda: _answer("kept"))
        task = await store.create("alice", "python", work)
        assert store.get(task.id, "alice") is task
        with anyio.fail_after(10):
            await stopped.wait()  # the store's expiry loop cancelled it
        await eventually(lambda: len(store) == 0, 10, "both tasks were removed")
        with pytest.raises(MCPError) as refused:
            store.get(task.id, "alice")
        with pytest.raises(MCPError, match="unknown task"):
            store.get(finished.id, "alice")  # a finished task's result is kept its ttl, then removed too
    assert refused.value.error.message == unknown_task(task.id) and task.status == "cancelled" and killed == [True]
    assert finished.result == {"text": "kept"}


async def test_an_owner_running_its_limit_is_refused_until_one_ends() -> None:
    store = TaskStore("cd" * 8, ttl_s=60, max_per_owner=2, poll_ms=100)
    async with store.running():
        held = [await store.create("alice", "python", _wait_forever) for _ in range(2)]
        with pytest.raises(MCPError, match="runs 2 tasks on this replica, its limit"):
            await store.create("alice", "python", _wait_forever)
        assert (await store.create("bob", "python", _wait_forever)).owner == "bob"
        store.cancel(held[0].id, "alice")
        await eventually(lambda: store.working == 2, 10, "the cancelled task's work ended")
        assert store.get(held[0].id, "alice").status == "cancelled"  # kept until its ttl, no longer counted
        await store.create("alice", "python", _wait_forever)
    assert {t.status for t in held} == {"cancelled"}  # the server's stop cancels what still runs


async def test_the_limit_holds_across_replicas_and_a_dead_replicas_places_lapse(redis_url: str) -> None:
    a = TaskStore("a1" * 8, ttl_s=60, max_per_owner=3, poll_ms=100, counts=FleetCounts(redis_url))
    b = TaskStore("b2" * 8, ttl_s=60, max_per_owner=3, poll_ms=100, counts=FleetCounts(redis_url))
    dead = FleetCounts(redis_url, lease_s=0.5)  # a replica that took a place, then died without renewing it
    assert await dead.take("carol", "lost-task", 3) is None
    async with a.running(), b.running():
        await a.create("carol", "python", _wait_forever)
        await b.create("carol", "python", _wait_forever)
        with pytest.raises(MCPError, match="runs 3 tasks across the fleet, its limit"):
            await a.create("carol", "python", _wait_forever)

        def lapsed() -> bool:
            with redis.from_url(redis_url) as client:
                secs, micros = client.time()
                return float(client.zscore(KEY + "carol", "lost-task")) < secs * 1000 + micros // 1000

        await eventually(lapsed, 20, "the dead replica's place lapsed")
        assert (await b.create("carol", "python", _wait_forever)).owner == "carol"
        finished = await a.create("dave", "python", lambda: _answer("done"))
        await eventually(lambda: a.working == 1, 10, "dave's task ended")  # its place was given back
        assert finished.status == "completed" and await FleetCounts(redis_url).take("dave", "next", 1) is None


async def _answer(text: str) -> dict[str, str]:
    return {"text": text}


async def test_a_task_waits_for_its_clients_answers_and_takes_them_one_at_a_time() -> None:
    store = TaskStore("ef" * 8, ttl_s=60, max_per_owner=4, poll_ms=100)

    async def work() -> dict[str, str]:
        answers: list[str] = []

        async def one(n: int) -> None:
            answers.append((await ask("elicitation/create", {"message": f"q{n}"}))["content"])

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 1)
            tg.start_soon(one, 2)
        return {"text": ",".join(sorted(answers))}

    async with store.running():
        task = await store.create("alice", "python", work, can_answer=frozenset({"elicitation"}))
        await eventually(lambda: len(task.asked) == 2, 10, "both questions are asked")
        first, second = store.detailed(task)["inputRequests"]
        store.update(task, {first: {"content": "x"}, "not-asked": {}})
        assert store.detailed(task)["status"] == "input_required" and list(task.asked) == [second]
        store.update(task, {second: {"content": "y"}})
        await eventually(lambda: task.status == "completed", 10, "the task completed")
        assert task.result == {"text": "x,y"}
        with pytest.raises(MCPError, match="is completed, not input_required"):
            store.update(task, {})
        CURRENT_TASK.set(None)
        with pytest.raises(MCPError, match="needs a task"):
            await ask("elicitation/create", {})
        unasked = await store.create("alice", "python", lambda: ask("sampling/createMessage", {}))
        await eventually(lambda: unasked.status == "failed", 10, "a request the client cannot answer failed")
        assert "did not declare" in (unasked.error or {})["message"]


async def test_a_drain_waits_for_tasks_refuses_new_ones_and_fails_those_left_at_its_deadline() -> None:
    store = TaskStore("0f" * 8, ttl_s=60, max_per_owner=4, poll_ms=100)
    drain = Drain(lambda _: False, lambda: 0, lambda: 1, instance=store.instance, tasks=store)
    store.on_end = drain.changed
    release = anyio.Event()

    async def short() -> dict[str, str]:
        await release.wait()
        return {"text": "finished"}

    async with store.running(), anyio.create_task_group() as tg:
        done = await store.create("alice", "python", short)
        left = await store.create("alice", "python", _wait_forever)
        tg.start_soon(drain, 1.0)
        await eventually(lambda: store.draining, 10, "the drain began")
        with pytest.raises(MCPError) as refused:
            await store.create("alice", "python", short)
        assert refused.value.error.code == DRAINED_CODE
        release.set()
        await eventually(lambda: left.status == "failed", 20, "the task left at the deadline failed")
        assert done.status == "completed" and "its drain (1 s) ended before the task did" in left.error["message"]
        left.told.set()  # its caller read it: the drain ends
