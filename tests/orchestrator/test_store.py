"""The response stores: Redis replicas share one real redis-server; SQLite stays off the event loop."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sqlite3
import uuid

import httpx
import openai
import pytest
import redis

from orchestrator.persist import Record
from orchestrator.persist.redis import RedisStores
from orchestrator.persist.roster import Running
from orchestrator.persist.sqlite import SQLiteResponses, SQLiteStores
from orchestrator.request.schema import ResponsesRequest
from orchestrator.responses.events import ResponseBuilder
from orchestrator.responses.live import Live
from orchestrator.responses.roster import MOST, ForegroundRoster
from orchestrator.worker.scripted import Scenario
from tests.support.asgi import free_port
from tests.support.redis import redis_server
from tests.support.service import running_service

PY_CALL = "<|channel|>analysis to=python<|message|>x = 6 * 7\nprint(x)<|call|>"
PY_AGAIN = "<|channel|>analysis to=python<|message|>print(x + 1)<|call|>"


def _redis(make_stack, redis_url, prefix=None, **extra):
    return make_stack(store="redis", redis_url=redis_url, redis_prefix=prefix or f"t{uuid.uuid4().hex[:8]}:", **extra)


def test_two_replicas_share_responses_and_continue_each_others_chains(make_stack, redis_url):
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    a, b = _redis(make_stack, redis_url, prefix), _redis(make_stack, redis_url, prefix)
    a.script(
        [
            ("<\\|start\\|>python to=assistant.*42", "<|channel|>final<|message|>It is 42.<|return|>"),
            ("<\\|start\\|>python to=assistant.*43", "<|channel|>final<|message|>Then 43.<|return|>"),
            ("compute", PY_CALL),
            ("again", PY_AGAIN),
        ]
    )
    tools = [{"type": "code_interpreter"}]
    first = a.client.responses.create(model="gpt-oss", input="compute", tools=tools, metadata={"on": "a"})
    seen = b.client.responses.retrieve(first.id)
    assert seen.output_text == "It is 42." and seen.metadata == {"on": "a"}
    assert [i.content[0].text for i in b.client.responses.input_items.list(first.id).data] == ["compute"]
    second = b.client.responses.create(model="gpt-oss", input="again", tools=tools, previous_response_id=first.id)
    assert second.output[0].outputs[0].logs == "43\n"  # same conversation id, so the same python session
    assert "It is 42." in a.model.encode_prompt_text(-1)  # B rendered A's turn from the shared store
    assert a.client.responses.retrieve(second.id).output_text == "Then 43."
    replay = list(a.client.responses.retrieve(second.id, stream=True))
    assert replay[-1].type == "response.completed" and replay[-1].response.id == second.id
    b.client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        a.client.responses.retrieve(first.id)


def test_redis_store_keeps_at_most_max_responses_per_key_and_expires_them(make_stack, redis_url):
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    stack = _redis(make_stack, redis_url, prefix, max_responses_per_key=3, retention_s=600)
    ids = [stack.client.responses.create(model="gpt-oss", input=f"hi {i}").id for i in range(5)]
    for rid in ids[:2]:
        with pytest.raises(openai.NotFoundError):
            stack.client.responses.retrieve(rid)
    assert [stack.client.responses.retrieve(rid).id for rid in ids[2:]] == ids[2:]
    with redis.from_url(redis_url) as client:
        assert client.zcard(f"{prefix}index") == 3 and client.zcard(f"{prefix}index:anonymous") == 3
        assert 0 < client.ttl(f"{prefix}resp:{ids[-1]}") <= 600


def test_redis_going_away_is_a_clear_503_not_a_crash(make_stack):
    with redis_server() as url:
        stack = _redis(make_stack, url)
        resp = stack.client.responses.create(model="gpt-oss", input="hi")
        with redis.from_url(url) as client:
            client.shutdown(nosave=True)
    with pytest.raises(openai.APIStatusError) as err:
        stack.client.responses.retrieve(resp.id)
    assert err.value.status_code == 503 and "Redis" in err.value.message
    assert err.value.body["code"] == "store_unavailable"


async def test_the_redis_store_stores_again_at_once_after_redis_restarted() -> None:
    """Every pooled connection died with the old Redis: the first commands after it came back must not fail
    (they did once per pooled connection, and a response answered `completed` was never stored)."""
    port = free_port()
    with redis_server(port) as url:
        stores = RedisStores(url, prefix=f"t{uuid.uuid4().hex[:8]}:")
        store = stores.responses
        await asyncio.gather(*(store.put(Record(f"resp_before{i}", "conv", {"status": "completed"})) for i in range(4)))
    try:
        with redis_server(port):  # back, empty (no persistence)
            for i in range(4):  # as many as there are pooled connections
                await store.put(Record(f"resp_after{i}", "conv", {"status": "completed"}))
            assert (await store.get("resp_after3")) is not None and await store.get("resp_before0") is None
    finally:
        await stores.aclose()


def redis_orchestrator(worker_url: str, redis_url: str, *more: str) -> list[str]:
    """Arguments of an orchestrator on the Redis store under a prefix of its own (replicas given the same list
    share it)."""
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    flags = ["--store", "redis", "--redis-url", redis_url, "--worker-urls", f'["{worker_url}"]']
    return ["-m", "orchestrator", *flags, "--redis-prefix", prefix, *more]


def test_orchestrator_processes_started_with_store_redis_flags_share_one_redis(scripted, redis_url):
    worker_url, model = scripted
    model.scenario = Scenario()
    flags = redis_orchestrator(worker_url, redis_url, "--date", "2026-12-02")
    with running_service(flags) as a, running_service(flags) as b:
        first = httpx.post(f"{a.url}/v1/responses", json={"input": "hi"}, timeout=30).json()
        assert first["status"] == "completed"
        second = httpx.post(
            f"{b.url}/v1/responses", json={"input": "more", "previous_response_id": first["id"]}, timeout=30
        ).json()
        assert second["status"] == "completed" and second["previous_response_id"] == first["id"]
        assert httpx.get(f"{a.url}/v1/responses/{second['id']}").json()["id"] == second["id"]


def test_unreachable_redis_stops_the_start_up_with_a_clear_error(scripted):
    flags = [
        "-m",
        "orchestrator",
        "--store",
        "redis",
        "--redis-url",
        f"redis://127.0.0.1:{free_port()}/0",
        "--worker-urls",
        f'["{scripted[0]}"]',
    ]
    with pytest.raises(RuntimeError) as err, running_service(flags, timeout_s=30):
        pass
    assert "Redis store is unavailable" in str(err.value)


def test_a_background_response_on_one_replica_is_polled_replayed_and_cancelled_from_another(
    make_stack, redis_url, two_workers
):
    from conftest import scenario
    from invariants import check_stream
    from test_workers import wait_for

    url, worker = two_workers[0]
    slow = "<|channel|>final<|message|>" + "slow " * 3000 + "<|return|>"
    short = "<|channel|>final<|message|>" + "tick " * 60 + "<|return|>"
    worker.scenario = scenario(
        [{"match": "short", "reply": short, "delay_s": 0.005}, {"match": "", "reply": slow, "delay_s": 0.005}]
    )
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    a, b = (_redis(make_stack, redis_url, prefix, worker_urls=[url], cancel_poll_s=0.05) for _ in range(2))
    bg = a.client.responses.create(model="gpt-oss", input="long job", background=True)
    assert b.client.responses.retrieve(bg.id).status in ("queued", "in_progress")
    with pytest.raises(openai.BadRequestError) as err:
        b.client.responses.create(model="gpt-oss", input="next", previous_response_id=bg.id)
    assert "has not finished" in err.value.message
    assert b.client.responses.cancel(bg.id).status == "cancelled"
    wait_for(lambda: worker.stats.aborted == 1, "the worker to see the generation aborted")
    assert a.client.responses.retrieve(bg.id).status == "cancelled"
    assert check_stream(list(b.client.responses.retrieve(bg.id, stream=True))).status == "cancelled"
    running = a.client.responses.create(model="gpt-oss", input="short job", background=True)
    final = check_stream(list(b.client.responses.retrieve(running.id, stream=True)))  # follows the shared store
    assert final.status == "completed" and final.output_text.startswith("tick")


async def test_a_slow_sqlite_write_does_not_stall_the_event_loop(tmp_path) -> None:
    """While another thread holds the connection (as a long commit would), the loop keeps serving."""
    import threading

    import anyio

    stores = SQLiteStores(str(tmp_path / "s.sqlite3"))
    store = stores.responses
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    stores.connection._lock.acquire()  # the connection is busy
    threading.Timer(0.5, stores.connection._lock.release).start()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            await store.put(Record("resp_slow", "conv", {"status": "completed"}))
            tg.cancel_scope.cancel()
    assert ticks >= 10  # the loop ran throughout the half second the write waited
    assert (await store.get("resp_slow")).body == {"status": "completed"}
    await stores.aclose()


def test_a_sqlite_file_another_process_keeps_locked_is_a_clear_503_and_reads_go_on(make_stack, tmp_path) -> None:
    path = tmp_path / "store.sqlite3"
    stack = make_stack(stores=SQLiteStores(str(path)))
    stack.script([("hello", "<|channel|>final<|message|>Hi.<|return|>")])
    kept = stack.client.responses.create(model="gpt-oss", input="hello")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # a writer that does not let go: past the store's busy timeout (5 s)
        with pytest.raises(openai.APIStatusError) as err:
            stack.client.with_options(max_retries=0).responses.create(model="gpt-oss", input="hello")
        assert err.value.status_code == 503 and err.value.body["code"] == "store_unavailable"
        assert "the SQLite store is unavailable: database is locked" in err.value.message
        assert stack.client.responses.retrieve(kept.id).output_text == "Hi."  # a WAL reader is not blocked
    finally:
        other.close()
    assert stack.client.responses.create(model="gpt-oss", input="hello").output_text == "Hi."


class _SlowResponses(SQLiteResponses):
    """A store whose writes lag: the terminal event reaches the client before the response is stored."""

    async def put(self, record: Record) -> None:
        await asyncio.sleep(0.5)
        await super().put(record)


def with_responses(kind: type[SQLiteResponses]) -> SQLiteStores:
    """In-memory stores whose response store is a `kind`."""
    stores = SQLiteStores()
    stores.responses = kind(stores.connection)
    return stores


def test_a_chain_continued_the_moment_its_stream_ends_finds_the_response_it_names(make_stack):
    stack = make_stack(stores=with_responses(_SlowResponses))
    stack.script(
        [
            ("again", "<|channel|>final<|message|>Once more.<|return|>"),
            ("hello", "<|channel|>final<|message|>Hi.<|return|>"),
        ]
    )
    events = list(stack.client.responses.create(model="gpt-oss", input="hello", stream=True))
    assert events[-1].type == "response.completed"
    second = stack.client.responses.create(model="gpt-oss", input="again", previous_response_id=events[-1].response.id)
    assert second.output_text == "Once more."


def test_a_background_response_cut_off_mid_generation_by_a_killed_replica_is_generated_again_elsewhere(
    scripted, redis_url
):
    from conftest import scenario
    from invariants import check_stream
    from test_workers import wait_for

    worker_url, model = scripted
    model.scenario = scenario(
        [{"match": "", "reply": "<|channel|>final<|message|>" + "slow " * 300 + "<|return|>", "delay_s": 0.01}]
    )
    flags = redis_orchestrator(worker_url, redis_url, "--background-hold-s", "3")
    with running_service(flags) as doomed, running_service(flags) as survivor:
        bg = httpx.post(f"{doomed.url}/v1/responses", json={"input": "long job", "background": True}, timeout=30).json()
        client = openai.OpenAI(base_url=f"{survivor.url}/v1", api_key="unused", max_retries=0)
        wait_for(lambda: client.responses.retrieve(bg["id"]).output, "the answer under way (stored by the heartbeat)")
        doomed.stop(signal.SIGKILL)  # no shutdown at all: only the lapsed hold tells
        wait_for(lambda: client.responses.retrieve(bg["id"]).status == "completed", "the adopted response to finish")
        final = check_stream(list(client.responses.retrieve(bg["id"], stream=True)))  # gapless, each item closed
        cut, whole = final.output  # the message cut off stays, cut short; the turn was generated again
        assert cut.status == "incomplete" and whole.status == "completed"
        assert whole.content[0].text.strip() == ("slow " * 300).strip()
        assert whole.content[0].text.startswith(cut.content[0].text)
        with pytest.raises(openai.BadRequestError):
            client.responses.cancel(bg["id"])  # nothing runs any more
        assert "response.adopted" in survivor.log()


async def test_a_sqlite_hold_lasts_its_time_is_renewed_by_its_holder_and_taken_by_one_other_once_lapsed() -> None:
    stores = SQLiteStores()
    store = stores.responses
    assert await store.hold_running(["resp_a", "resp_b"], 2, "one") == {"resp_a", "resp_b"}
    assert await store.is_held("resp_a") and not await store.is_held("resp_c")
    assert await store.hold_running(["resp_a"], 2, "two") == set()  # held by another: left alone
    await asyncio.sleep(1.2)
    assert await store.hold_running(["resp_a"], 2, "one") == {"resp_a"}  # renewed: b lapses first
    await asyncio.sleep(1.2)
    assert await store.is_held("resp_a") and not await store.is_held("resp_b")
    assert await store.orphaned() == ["resp_b"] and await store.held(10, "") == {"resp_a": "one"}  # the lapsed: not
    assert await store.held(10, "one") == {}  # nor the asking replica's own
    taken = await asyncio.gather(*(store.hold_running(["resp_b"], 2, f"r{i}") for i in range(4)))
    assert sum(len(t) for t in taken) == 1  # adopted by one replica alone
    await store.release_running("resp_b", "one")  # not its holder: nothing happens
    assert await store.is_held("resp_b")
    await store.release_running("resp_b", next(f"r{i}" for i, t in enumerate(taken) if t))
    assert not await store.is_held("resp_b") and await store.orphaned() == []
    await stores.aclose()


async def test_a_redis_hold_is_taken_by_one_replica_once_lapsed(redis_url) -> None:
    stores = RedisStores(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}:")
    store = stores.responses
    assert await store.hold_running(["resp_a"], 0.3, "one") == {"resp_a"}
    assert await store.hold_running(["resp_a"], 0.3, "two") == set() and await store.orphaned() == []
    assert await store.held(10, "two") == {"resp_a": "one"} and await store.held(10, "one") == {}
    await asyncio.sleep(0.5)
    assert await store.orphaned() == ["resp_a"] and await store.held(10, "two") == {}
    taken = await asyncio.gather(*(store.hold_running(["resp_a"], 5, f"r{i}") for i in range(4)))
    assert sum(len(t) for t in taken) == 1
    winner = next(f"r{i}" for i, t in enumerate(taken) if t)
    await store.release_running("resp_a", winner)
    assert not await store.is_held("resp_a") and await store.orphaned() == []
    await stores.aclose()


class _BrokenResponses(SQLiteResponses):
    """A store that takes no response: its writes fail, as a store gone away for good would."""

    async def put(self, record: Record) -> None:
        raise ConnectionError("the disk went away")


def test_a_response_that_finished_but_could_not_be_stored_is_not_answered_as_kept(make_stack):
    stack = make_stack(stores=with_responses(_BrokenResponses))
    stack.script([("hello", "<|channel|>final<|message|>Hi.<|return|>")])
    with pytest.raises(openai.APIStatusError) as err:
        stack.client.with_options(max_retries=0).responses.create(model="gpt-oss", input="hello")
    assert err.value.status_code == 503
    assert "could not be stored: the disk went away" in str(err.value)
    events = list(stack.client.responses.create(model="gpt-oss", input="hello", stream=True))
    assert [e.type for e in events[-2:]] == ["response.completed", "error"]
    assert events[-1].code == "store_unavailable" and "could not be stored" in events[-1].message
    assert events[-1].sequence_number == events[-2].sequence_number + 1
    with pytest.raises(openai.NotFoundError):
        stack.client.responses.retrieve(events[-2].response.id)
    unstored = stack.client.responses.create(model="gpt-oss", input="hello", store=False)
    assert unstored.output_text == "Hi."  # nothing promised, nothing to refuse


def _delta(n: int) -> dict[str, object]:
    return {"type": "response.output_text.delta", "sequence_number": n, "delta": f"w{n} "}


@pytest.fixture(params=["sqlite", "redis"])
async def event_stores(request: pytest.FixtureRequest):
    """Each backend's stores: SQLite in a file, Redis under a prefix of its own on the module's redis-server."""
    if request.param == "sqlite":
        stores = SQLiteStores(str(request.getfixturevalue("tmp_path") / "store.sqlite3"))
    else:
        stores = RedisStores(request.getfixturevalue("redis_url"), prefix=f"t{uuid.uuid4().hex[:8]}:", ttl_s=600)
    yield stores
    await stores.aclose()


async def test_a_background_response_s_event_log_is_appended_only_by_its_holder_and_only_where_it_ends(
    event_stores,
) -> None:
    store = event_stores.responses
    await store.put(Record("resp_log", "conv", {"status": "in_progress"}, owner="k"))  # its events left out
    assert await store.hold_running(["resp_log"], 30, "one") == {"resp_log"}
    assert await store.append_events("resp_log", 0, [_delta(0), _delta(1)], "one", 30)
    assert await store.append_events("resp_log", 2, [_delta(2)], "one", 30)
    assert not await store.append_events("resp_log", 2, [_delta(2)], "one", 30)  # the log does not end at 2
    assert not await store.append_events("resp_log", 3, [_delta(3)], "two", 30)  # another replica's hold
    assert await store.events("resp_log", 0) == [_delta(1), _delta(2)]
    record = await store.get("resp_log")
    assert record is not None and record.events == [_delta(0), _delta(1), _delta(2)]  # read back from the log
    await store.put(Record("resp_kept", "conv", {"status": "completed"}, events=[_delta(0)], owner="k"))
    assert (await store.get("resp_kept")).events == [_delta(0)]  # a record keeping its own events
    assert await store.delete("resp_log") and await store.events("resp_log", -1) == []


async def test_an_append_renews_its_holder_s_hold_and_takes_a_lapsed_one_nobody_adopted(event_stores) -> None:
    store = event_stores.responses
    await store.put(Record("resp_lapsed", "conv", {"status": "in_progress"}, owner="k"))
    assert await store.hold_running(["resp_lapsed"], 0.2, "one") == {"resp_lapsed"}
    await asyncio.sleep(0.4)
    assert not await store.is_held("resp_lapsed")
    assert await store.append_events("resp_lapsed", 0, [_delta(0)], "one", 30)  # lapsed, nobody took it
    assert await store.is_held("resp_lapsed") and await store.hold_running(["resp_lapsed"], 30, "two") == set()
    await store.release_running("resp_lapsed", "one")
    assert await store.hold_running(["resp_lapsed"], 30, "two") == {"resp_lapsed"}  # adopted
    assert not await store.append_events("resp_lapsed", 1, [_delta(1)], "one", 30)  # fenced off
    assert await store.events("resp_lapsed", -1) == [_delta(0)]


async def test_the_redis_event_log_expires_with_the_response_and_goes_with_an_evicted_one(redis_url) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    stores = RedisStores(redis_url, prefix=prefix, ttl_s=600, per_key=1)
    store = stores.responses
    try:
        await store.put(Record("resp_old", "conv", {"status": "in_progress"}, owner="k"))
        assert await store.append_events("resp_old", 0, [_delta(0)], "one", 30)
        with redis.from_url(redis_url) as client:
            assert 0 < client.ttl(f"{prefix}events:resp_old") <= 600
            await store.put(Record("resp_new", "conv", {"status": "completed"}, owner="k"))  # per_key 1: evicts
            assert not client.exists(f"{prefix}events:resp_old")
    finally:
        await stores.aclose()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_the_foreground_roster_lists_other_replicas_lists_as_last_renewed_until_they_lapse(
    backend: str, redis_url: str
) -> None:
    stores = SQLiteStores() if backend == "sqlite" else RedisStores(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}:")
    roster = stores.roster
    x, y = (
        Running("resp_x", "key-1", "gpt-oss", 1000.0, "replica_a"),
        Running("resp_y", "key-1", "m", 1001.0, "replica_a"),
    )
    z = Running("resp_z", "key-2", "gpt-oss", 1002.0, "replica_b")
    try:
        await roster.renew("replica_a", [x, y], 60)
        await roster.renew("replica_b", [z], 60)
        assert await roster.listed(10, besides="replica_a") == [z]
        assert await roster.listed(10, besides="replica_b") == [x, y]
        assert await roster.listed(1, besides="nobody") == [x]  # bounded, oldest first
        counted = dataclasses.replace(x, tool_calls=2)
        await roster.renew("replica_a", [counted], 60)  # y ended, x made two tool calls
        assert await roster.listed(10, besides="replica_b") == [counted]
        assert await roster.extend("replica_a", 60) and await roster.listed(10, besides="replica_b") == [counted]
        await roster.renew("replica_b", [z], -1)  # its replica stopped renewing: the list lapsed
        assert await roster.listed(10, besides="replica_a") == []
        assert not await roster.extend("replica_b", 60)  # a lapsed list is not brought back: it is renewed whole
        await roster.renew("replica_a", [], 60)  # nothing running there any more
        assert await roster.listed(10, besides="nobody") == []
        assert not await roster.extend("replica_a", 60)
    finally:
        await stores.aclose()


async def test_a_replicas_roster_tick_lists_its_longest_running_foreground_ones_and_mends_a_lost_list() -> None:
    stores = SQLiteStores()
    live = {}
    for i in range(MOST + 5):
        body = {"id": f"resp_{i:05d}", "model": "gpt-oss", "created_at": 1000 + i, "output": []}
        live[body["id"]] = Live(ResponseBuilder(body), ResponsesRequest(model="gpt-oss", input="hi"), "key_1")
    live["resp_bg"] = Live(ResponseBuilder({"id": "resp_bg"}), ResponsesRequest(input="hi", background=True), "k")
    here = ForegroundRoster(stores.roster, "replica_here", live)
    try:
        await here.renew()
        listed = await stores.roster.listed(2 * MOST, besides="elsewhere")
        assert [e.id for e in listed] == [f"resp_{i:05d}" for i in range(MOST)]  # bounded; background ones apart
        await stores.connection.run(stores.connection.db.execute, "DELETE FROM foreground")  # the store lost it
        await here.renew()  # nothing changed here: the expiry it pushes on finds no list, so it is written whole
        assert len(await stores.roster.listed(2 * MOST, besides="elsewhere")) == MOST
        live["resp_00000"].builder.body["output"].append({"type": "mcp_call", "id": "mcp_1"})
        await here.renew()
        first = (await stores.roster.listed(1, besides="elsewhere"))[0]
        assert (first.id, first.tool_calls) == ("resp_00000", 1)  # its tool call, at the next tick
    finally:
        await stores.aclose()
