"""Fleet-wide affinity: two orchestrator replicas sharing one real redis-server route a conversation's turns to
the same one of two scripted stand-in workers; a saturated pinned worker spills and re-pins; the map's bounds."""

from __future__ import annotations

import re
import uuid

import httpx
import pytest
from conftest import scenario

from orchestrator.worker.affinity import MemoryAffinity, RedisAffinity, keys_for
from orchestrator.worker.client import prefix_cache_counters
from tests.support.service import wait_until

SLOW = "<|channel|>final<|message|>" + "slow " * 2000 + "<|return|>"
FAST = "<|channel|>final<|message|>Done.<|return|>"


def metric(url: str, name: str, **labels: str) -> float:
    """The sum of an orchestrator /metrics family's samples that have `labels` (0 when there is none)."""
    text = httpx.get(f"{url}/metrics").text
    wanted = "".join(f'(?=[^}}]*{k}="{re.escape(v)}")' for k, v in labels.items())
    return sum(float(v) for v in re.findall(rf"^{name}{{{wanted}[^}}]*}} (\S+)$", text, re.M))


@pytest.fixture
def replicas(make_stack, redis_url, two_workers):
    """Two replicas on one Redis prefix, listing the workers in opposite orders: without the shared map each
    would send a new conversation to its own first worker."""
    (url1, w1), (url2, w2) = two_workers
    for w in (w1, w2):
        w.scenario = scenario([{"match": "busy", "reply": SLOW, "delay_s": 0.01}], default=FAST)
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    common = {"store": "redis", "redis_url": redis_url, "redis_prefix": prefix, "affinity_spill_at": 1}
    return make_stack([url1, url2], **common), make_stack([url2, url1], **common), two_workers


def test_a_conversations_turns_land_on_one_worker_whichever_replica_takes_them(replicas):
    a, b, ((url1, w1), (_, w2)) = replicas
    turn = a.client.responses.create(model="gpt-oss", input="conversation A")
    for n, replica in enumerate([b, a, b]):
        turn = replica.client.responses.create(model="gpt-oss", input=f"turn {n}", previous_response_id=turn.id)
    assert (w1.stats.requests, w2.stats.requests) == (4, 0)
    assert turn.usage.input_tokens_details.cached_tokens > 0
    first = b.client.responses.create(model="gpt-oss", input="one opening", prompt_cache_key="shared-k")
    other = a.client.responses.create(model="gpt-oss", input="another opening", prompt_cache_key="shared-k")
    assert (w1.stats.requests, w2.stats.requests) == (4, 2)  # b's first worker, then the key's pin
    assert first.prompt_cache_key == other.prompt_cache_key == "shared-k"
    assert metric(a.url, "toolfleet_orchestrator_worker_affinity_total", outcome="hit") == 2
    assert metric(b.url, "toolfleet_orchestrator_worker_affinity_total", outcome="hit") == 2
    worker1 = {"worker": url1}
    scraped = {
        kind: lambda kind=kind: metric(a.url, "toolfleet_orchestrator_worker_prefix_cache_total", kind=kind, **worker1)
        for kind in ("hits", "queries")
    }  # the first read of /metrics starts the scrapes; the health check (every 0.5 s here) makes them
    assert wait_until(lambda: scraped["queries"]() == w1.stats.prefix_cache_queries, 10.0), (
        "worker 1's counters scraped"
    )
    assert 0 < scraped["hits"]() == w1.stats.prefix_cache_hits


def test_a_saturated_pinned_worker_spills_and_the_conversation_is_re_pinned(replicas):
    a, b, ((_, w1), (_, w2)) = replicas
    first = a.client.responses.create(model="gpt-oss", input="conversation S")
    busy = a.client.responses.create(model="gpt-oss", input="busy", background=True)
    assert wait_until(lambda: w1.stats.in_flight == 1, 10.0), "the long generation on worker 1"
    second = a.client.responses.create(model="gpt-oss", input="next", previous_response_id=first.id)
    assert (w1.stats.requests, w2.stats.requests) == (2, 1)  # worker 1 is at --affinity-spill-at 1
    assert a.client.responses.cancel(busy.id).status == "cancelled"
    assert wait_until(lambda: w1.stats.in_flight == 0, 10.0), "the cancelled generation to be aborted"
    b.client.responses.create(model="gpt-oss", input="and on", previous_response_id=second.id)
    assert (w1.stats.requests, w2.stats.requests) == (2, 2)  # re-pinned where it spilled, seen by the other replica
    spills = metric(a.url, "toolfleet_orchestrator_worker_affinity_total", outcome="spill")
    assert spills == 1 and metric(b.url, "toolfleet_orchestrator_worker_affinity_total", outcome="hit") == 1


async def test_the_memory_map_is_bounded_and_its_pins_lapse() -> None:
    now = [0.0]
    pins = MemoryAffinity(2, ttl_s=10, clock=lambda: now[0])
    await pins.pin(["a"], "w1")
    await pins.pin(["b", "c"], "w2")  # three keys for two places: `a`, the least recently pinned, goes
    assert [await pins.find([k]) for k in "abc"] == [None, "w2", "w2"]
    assert await pins.find(["x", "c"]) == "w2"  # the first key pinned decides
    now[0] = 11
    assert await pins.find(["b"]) is None


async def test_the_redis_map_is_bounded(redis_url) -> None:
    pins = RedisAffinity(redis_url, f"t{uuid.uuid4().hex[:8]}:", size=3, ttl_s=60)
    try:
        for n in range(5):
            await pins.pin([f"k{n}"], f"w{n}")
        assert [await pins.find([f"k{n}"]) for n in range(5)] == [None, None, "w2", "w3", "w4"]
        assert await pins.client.ttl(f"{pins._prefix}k4") > 0
    finally:
        await pins.client.delete(f"{pins._prefix}index", *(f"{pins._prefix}k{n}" for n in range(5)))
        await pins.aclose()


def test_keys_go_from_the_most_specific_and_the_cache_key_is_the_owners() -> None:
    keys = keys_for("conv_1", "k", "owner-a", [{"role": "system"}])
    assert keys[:2] == ("chain:conv_1", "pck:owner-a:k") and keys[2].startswith("prefix:")
    assert keys_for("conv_2", None, "owner-b", [{"role": "system"}])[1] == keys[2]


def test_vllms_prefix_cache_counters_are_summed_over_engines() -> None:
    text = (
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 96.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 4.0\n'
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 200.0\n'
        'vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e9\n'
    )
    assert prefix_cache_counters(text) == {"hits": 100.0, "queries": 200.0}
