"""The Keys page in Chromium: a response made with the client key moves its counts (requests, responses,
tokens), shown by the key's id and never the key; a 429 counted by kind; and two replicas over one Redis reading
each other's counts."""

from __future__ import annotations

import openai
import pytest
from selenium import webdriver

from orchestrator.guard.auth import key_id
from orchestrator.guard.limits import KeyLimits, LimitExceeded, RequestRate, Slots
from orchestrator.persist.redis import RedisStores
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.usage import Usage
from orchestrator.worker.scripted import Scenario
from tests.console.stack import ADMIN, CLIENT, GATEWAY_ADMIN, Fleet, log_in, shot
from tests.support.gateway import metric
from tests.support.redis import redis_server

QUICK = "<|channel|>final<|message|>counted<|return|>"


def _counts(browser: webdriver.Chrome, fleet: Fleet) -> list[int]:
    browser.get(f"{fleet.url}/console/keys?q={key_id(CLIENT)}")
    cells = browser.find_elements("css selector", f"#key-{key_id(CLIENT)} td")
    return [int(c.text.split()[0]) for c in cells[1:6]]  # requests, responses, tokens in, tokens out, tool calls


def test_the_keys_page_counts_a_response_of_the_client_key(fleet: Fleet, browser: webdriver.Chrome) -> None:
    fleet.model.scenario = Scenario.from_dict({"rules": [], "default": QUICK})
    log_in(browser, fleet.url, ADMIN)
    before = _counts(browser, fleet)
    client = openai.OpenAI(base_url=f"{fleet.url}/v1", api_key=CLIENT, max_retries=0, timeout=30)
    done = client.responses.create(model="gpt-oss", input="count me")
    assert done.status == "completed" and done.usage is not None
    after = _counts(browser, fleet)
    assert after[0] >= before[0] + 1 and after[1] == before[1] + 1
    assert after[2] == before[2] + done.usage.input_tokens and after[3] == before[3] + done.usage.output_tokens
    counted = metric(fleet.url, "toolfleet_orchestrator_key_usage_total", key=key_id(CLIENT), counter="responses")
    assert counted == after[1]  # this one replica counted every response the page shows
    shot(browser, "keys")
    assert all(secret not in browser.page_source for secret in (CLIENT, ADMIN, GATEWAY_ADMIN))


async def test_each_429_is_counted_by_kind_for_its_key() -> None:
    stores = SQLiteStores()
    usage = Usage(stores.usage)
    limits = KeyLimits(RequestRate(1, 1), Slots(1, "at most {limit}"), Slots(0, "unused"))
    limits.count_refusals(usage.refused)
    with limits.running.take("key_a"), pytest.raises(LimitExceeded):
        limits.running.take("key_a")
    limits.rate.admit("key_b")
    with pytest.raises(LimitExceeded):
        limits.rate.admit("key_b")  # a burst of 1, refilled at one a second
    assert await usage.totals() == {"key_a": {"limit:running": 1}, "key_b": {"limit:rate": 1}}
    usage.refused("key_a", "running")
    assert (await usage.totals())["key_a"] == {"limit:running": 2}  # added to the store's count, not replacing it
    await stores.aclose()


async def test_two_replicas_sharing_a_redis_store_read_each_others_counts() -> None:
    with redis_server() as url:
        one, two = RedisStores(url, prefix="usage-test:"), RedisStores(url, prefix="usage-test:")
        first, second = Usage(one.usage), Usage(two.usage)
        first.settled("key_a", {"input_tokens": 5, "output_tokens": 2}, [("python", "ok")])
        second.request("key_a")
        await first.flush()
        assert await second.totals() == {
            "key_a": {"responses": 1, "tokens_in": 5, "tokens_out": 2, "tool_calls": 1, "requests": 1}
        }
        await one.aclose()
        await two.aclose()
