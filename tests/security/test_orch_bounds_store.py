"""Issue 32, finding 3: stored objects are bounded per owner, on both stores. A key's new response or
conversation drops only that key's own oldest; the fleet-wide bound refuses (507 `store_full`) rather than
dropping another key's objects. Real HTTP on loopback, the SQLite store and a real redis-server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from orchestrator.persist import Record, Store, Stores
from orchestrator.persist.redis import RedisStores
from orchestrator.persist.sqlite import SQLiteStores
from tests.security.orch_bounds_support import KEYS, MODEL, bearer, gated_worker, orchestrator
from tests.support.redis import redis_server

PER_KEY = 3
FLEET = 12
STORES = ["sqlite", "redis"]


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="module")
def fleets(redis_url) -> Iterator[dict[str, str]]:
    """One orchestrator per store kind, both bounded at PER_KEY per key and FLEET in all."""
    bounds = {"max_responses_per_key": PER_KEY, "max_responses": FLEET}
    redis_settings = {"store": "redis", "redis_url": redis_url, "redis_prefix": f"b{uuid.uuid4().hex[:8]}:"}
    with (
        gated_worker() as (worker_url, _, _),
        orchestrator(worker_url, SQLiteStores(max_responses=FLEET, per_key=PER_KEY), **bounds) as sqlite,
        orchestrator(worker_url, **bounds, **redis_settings) as redis,
    ):
        yield {"sqlite": sqlite, "redis": redis}


_keys = iter(KEYS)


class Caller:
    """One API key of one fleet, over plain HTTP."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, headers=bearer(next(_keys)), timeout=30)

    def respond(self) -> httpx.Response:
        return self.http.post("/v1/responses", json={"model": MODEL, "input": "hello"})

    def converse(self) -> httpx.Response:
        items = [{"type": "message", "role": "user", "content": "remember this"}]
        return self.http.post("/v1/conversations", json={"items": items})

    def kept(self, path: str, ids: list[str]) -> list[bool]:
        return [self.http.get(f"{path}/{i}").status_code == 200 for i in ids]


def made(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


@pytest.mark.parametrize("store", STORES)
def test_another_keys_responses_never_drop_mine_and_each_key_keeps_its_newest(fleets, store):
    a, b = Caller(fleets[store]), Caller(fleets[store])
    mine = [made(a.respond()) for _ in range(2)]
    theirs = [made(b.respond()) for _ in range(FLEET + 2)]  # more than the whole fleet's bound
    assert a.kept("/v1/responses", mine) == [True, True]
    assert b.kept("/v1/responses", theirs) == [False] * (FLEET + 2 - PER_KEY) + [True] * PER_KEY  # B's own oldest


@pytest.mark.parametrize("store", STORES)
def test_another_keys_conversations_never_drop_mine_nor_their_items(fleets, store):
    a, b = Caller(fleets[store]), Caller(fleets[store])
    mine = [made(a.converse()) for _ in range(2)]
    theirs = [made(b.converse()) for _ in range(FLEET + 2)]
    assert a.kept("/v1/conversations", mine) == [True, True]
    for conv in mine:
        items = a.http.get(f"/v1/conversations/{conv}/items").json()["data"]
        assert [i["content"][0]["text"] for i in items] == ["remember this"]
    assert b.kept("/v1/conversations", theirs) == [False] * (FLEET + 2 - PER_KEY) + [True] * PER_KEY


@pytest.mark.parametrize("store", STORES)
def test_a_conversation_written_to_is_kept_over_its_keys_older_ones(fleets, store):
    a = Caller(fleets[store])
    convs = [made(a.converse()) for _ in range(PER_KEY)]
    item = {"type": "message", "role": "user", "content": "still here"}
    assert a.http.post(f"/v1/conversations/{convs[0]}/items", json={"items": [item]}).status_code == 200
    made(a.converse())  # drops the least recently written: convs[1], not convs[0]
    assert a.kept("/v1/conversations", convs) == [True, False, True]


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("kind", ["responses", "conversations"])
def test_the_fleet_wide_bound_refuses_a_new_object_and_drops_nobodys(fleets, store, kind):
    callers, ids = [], {}
    refusal = None
    while refusal is None:  # new keys fill the store up to FLEET, each within its own bound
        caller = Caller(fleets[store])
        callers.append(caller)
        for _ in range(PER_KEY):
            answer = caller.respond() if kind == "responses" else caller.converse()
            if answer.status_code != 200:
                refusal = answer
                break
            ids.setdefault(caller, []).append(made(answer))
        assert len(callers) <= FLEET, "the fleet-wide bound never refused"
    assert refusal.status_code == 507, refusal.text
    error = refusal.json()["error"]
    assert error["code"] == "store_full" and error["type"] == "server_error"
    assert f"fleet-wide store is full: it holds {FLEET} {kind}" in error["message"]
    assert "nothing of another API key is dropped" in error["message"]
    path = f"/v1/{kind}"
    for caller, made_ids in ids.items():  # everything stored before the refusal is still there
        assert all(caller.kept(path, made_ids))
    full = next(c for c, made_ids in ids.items() if len(made_ids) == PER_KEY)
    newest = made(full.respond() if kind == "responses" else full.converse())  # at its own bound: its oldest go
    assert full.kept(path, [*ids[full], newest]) == [False, True, True, True]


@pytest.fixture(params=STORES)
async def bare_store(request, redis_url) -> Store:
    """A response store of each kind, bounded at one response per key (so RESULTS_PER_RESPONSE results per
    key)."""
    if request.param == "sqlite":
        stores: Stores = SQLiteStores(max_responses=100, per_key=1)
    else:
        stores = RedisStores(redis_url, max_responses=100, per_key=1, prefix=f"r{uuid.uuid4().hex[:8]}:")
    yield stores.responses
    await stores.aclose()


async def test_kept_results_and_reference_entries_are_bounded_per_owner(bare_store):
    mine = {f"key_a/ref:item_{n}": "resp_a" for n in range(3)}
    await bare_store.put_results(mine)
    for n in range(40):  # another owner writes far more than its bound
        await bare_store.put_results({f"key_b/ref:item_{n}": "resp_b"})
        await bare_store.put(Record(f"resp_b{n}", "conv_b", {"id": f"resp_b{n}"}, owner="key_b"))
    assert await bare_store.get_results(list(mine)) == mine
    theirs = await bare_store.get_results([f"key_b/ref:item_{n}" for n in range(40)])
    assert sorted(theirs) == sorted(f"key_b/ref:item_{n}" for n in range(32, 40))  # its newest 8 only


@pytest.mark.parametrize("store", STORES)
def test_another_keys_files_and_containers_never_drop_mine(fleets, store):
    """Files and containers have no count bound to make room in (they expire, and a key deletes its own):
    whatever another key creates, none of mine goes."""
    a, b = Caller(fleets[store]), Caller(fleets[store])

    def upload(caller: Caller) -> str:
        return made(caller.http.post("/v1/files", files={"file": ("a.txt", b"mine")}, data={"purpose": "user_data"}))

    def container(caller: Caller) -> str:
        return made(caller.http.post("/v1/containers", json={"name": "mine"}))

    files, containers = [upload(a)], [container(a)]
    for _ in range(FLEET + 2):
        upload(b)
        container(b)
    assert a.kept("/v1/files", files) == [True] and a.kept("/v1/containers", containers) == [True]
    assert a.http.get(f"/v1/files/{files[0]}/content").content == b"mine"
