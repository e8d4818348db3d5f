"""Fleet-wide Live: a background response running on one orchestrator replica is listed by another replica's
console (the two share a store) and cancelled from there, through the shared store; with a Redis store, a tool
call run by one replica streams into the other replica's feed."""

from __future__ import annotations

import contextlib
import json
import tempfile
import uuid

import httpx
import openai
from selenium import webdriver
from selenium.webdriver.support.ui import WebDriverWait

from orchestrator.persist.redis import RedisStores
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.worker.scripted import Scenario
from tests.console.stack import ADMIN, CLIENT, Fleet, admin_client, click, log_in, orchestrator
from tests.console.test_feed import ADDING, FIXTURE
from tests.support.redis import redis_server

SLOW = "<|channel|>final<|message|>" + "slow " * 5000 + "<|return|>"


def _worker(fleet: Fleet) -> str:
    with httpx.Client(trust_env=False) as probe:
        return str(probe.get(f"{fleet.url}/healthz").json()["workers"][0]["url"])


def test_another_replicas_background_response_is_listed_and_cancelled_here(
    fleet: Fleet, browser: webdriver.Chrome
) -> None:
    fleet.model.scenario = Scenario.from_dict({"rules": [], "default": SLOW, "token_delay_s": 0.01})
    worker = _worker(fleet)
    with tempfile.TemporaryDirectory(prefix="toolfleet-console-shared-") as scratch:
        one, two = SQLiteStores(f"{scratch}/store.sqlite3"), SQLiteStores(f"{scratch}/store.sqlite3")
        with (
            orchestrator(worker, None, one) as there,
            orchestrator(worker, None, two) as here,
            contextlib.ExitStack() as leaving,
        ):
            leaving.callback(browser.get, "about:blank")  # the Live page's event stream closed before its replica stops
            client = openai.OpenAI(base_url=f"{there}/v1", api_key=CLIENT, max_retries=0, timeout=30)
            running = client.responses.create(model="gpt-oss", input="long", background=True)
            log_in(browser, here, ADMIN)

            def listed(driver: webdriver.Chrome) -> bool:
                driver.get(f"{here}/console/live?q={running.id}")
                return bool(driver.find_elements("id", f"row-{running.id}"))

            WebDriverWait(browser, 20).until(listed)
            row = browser.find_element("id", f"row-{running.id}").text
            assert "replica_" in row and "this replica" not in row  # held by the other replica
            click(browser, f"#row-{running.id} button")
            assert f"{running.id} is now cancelled." in browser.find_element("css selector", "[role=status]").text
            assert client.responses.retrieve(running.id).status == "cancelled"  # the replica running it stopped
            WebDriverWait(browser, 20).until(lambda d: not listed(d))  # once its final record is in the store


def test_with_a_redis_store_a_tool_call_on_one_replica_streams_into_anothers_feed(fleet: Fleet) -> None:
    fleet.model.scenario = ADDING
    worker, prefix = _worker(fleet), f"console-{uuid.uuid4().hex[:8]}:"
    with (
        redis_server() as url,
        orchestrator(worker, fleet.gateway.base, RedisStores(url, prefix=prefix)) as there,
        orchestrator(worker, None, RedisStores(url, prefix=prefix)) as here,
        admin_client(here) as http,
        http.stream("GET", "/console/live/calls") as stream,
    ):
        lines = stream.iter_lines()
        assert next(lines) == "retry: 3000"  # the stream is open: every call from now on is in it
        client = openai.OpenAI(base_url=f"{there}/v1", api_key=CLIENT, max_retries=0, timeout=30)
        done = client.responses.create(model="gpt-oss", input="add them", tools=FIXTURE, store=False)  # type: ignore[arg-type]
        call = json.loads(next(line for line in lines if line.startswith("data: ")).removeprefix("data: "))
        seen = (call["namespace"], call["tool"], call["outcome"], call["response_id"])
        assert seen == ("fixture", "add", "ok", done.id)
        assert call["replica"].startswith("replica_") and call["latency"].endswith(" ms")
        assert f">{done.id}</a>" in http.get("/console/live").text  # kept for a page that loads, too
