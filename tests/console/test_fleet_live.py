"""Fleet-wide Live: a response running on one orchestrator replica is listed by another replica's console (the
two share a store): a background one cancelled from there, through the shared store, and a foreground one with
its replica's name and tool-call count, and no Cancel; with a Redis store, a tool call run by one replica
streams into the other replica's feed, and failed logins are bounded across the two."""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest
from selenium import webdriver
from selenium.webdriver.support.ui import WebDriverWait

from orchestrator.console.throttle import PER_ADDRESS
from orchestrator.persist.redis import RedisStores
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.worker.scripted import Scenario
from tests.console.stack import ADMIN, CLIENT, Fleet, admin_client, click, csrf_of, log_in, orchestrator
from tests.console.test_feed import ADD, ADDING, FIXTURE
from tests.support.redis import redis_server
from tests.support.service import wait_until

SLOW = "<|channel|>final<|message|>" + "slow " * 5000 + "<|return|>"
SLOWLY = Scenario.from_dict({"rules": [], "default": SLOW, "token_delay_s": 0.01})
ADD_THEN_SLOW = Scenario.from_dict(  # "add them": one call of fixture's add, then a long answer
    {
        "rules": [{"match": r"fixture\.add to=assistant", "reply": SLOW}, {"match": "add them", "reply": ADD}],
        "default": SLOW,
        "token_delay_s": 0.01,
    }
)


@dataclass
class Pair:
    there: str  # the replica that runs the responses (with the gateway, for tool calls)
    here: str  # the replica whose console is read


def _worker(fleet: Fleet) -> str:
    with httpx.Client(trust_env=False) as probe:
        return str(probe.get(f"{fleet.url}/healthz").json()["workers"][0]["url"])


@pytest.fixture(scope="module")
def pair(fleet: Fleet) -> Iterator[Pair]:
    """Two replicas over one real Redis, under a prefix of their own."""
    worker, prefix = _worker(fleet), f"console-{uuid.uuid4().hex[:8]}:"
    with (
        redis_server() as url,
        orchestrator(worker, fleet.gateway.base, RedisStores(url, prefix=prefix)) as there,
        orchestrator(worker, None, RedisStores(url, prefix=prefix)) as here,
    ):
        yield Pair(there, here)


def _row(html: str, rid: str) -> str | None:
    """The text of `rid`'s row on a Live page, tags stripped; None: not listed."""
    found = re.search(rf'<tr id="row-{rid}">(.*?)</tr>', html, re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(1))).strip() if found else None


def test_another_replicas_responses_are_listed_here_and_its_background_one_cancelled(
    fleet: Fleet, browser: webdriver.Chrome
) -> None:
    fleet.model.scenario = SLOWLY
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
            streaming = leaving.enter_context(client.responses.create(model="gpt-oss", input="long", stream=True))
            foreground = next(iter(streaming)).response.id  # response.created: it runs on `there`
            log_in(browser, here, ADMIN)

            def listed(driver: webdriver.Chrome, rid: str) -> bool:
                driver.get(f"{here}/console/live?q={rid}")
                return bool(driver.find_elements("id", f"row-{rid}"))

            WebDriverWait(browser, 20).until(lambda d: listed(d, running.id))
            row = browser.find_element("id", f"row-{running.id}").text
            assert "replica_" in row and "this replica" not in row  # held by the other replica
            WebDriverWait(browser, 20).until(lambda d: listed(d, foreground))
            row = browser.find_element("id", f"row-{foreground}").text
            assert "replica_" in row and "this replica" not in row and "not background: ends with its caller" in row
            assert browser.find_elements("css selector", f"#row-{foreground} button") == []  # no Cancel offered
            assert "foreground ones are not listed" not in browser.page_source
            WebDriverWait(browser, 20).until(lambda d: listed(d, running.id))
            click(browser, f"#row-{running.id} button")
            assert f"{running.id} is now cancelled." in browser.find_element("css selector", "[role=status]").text
            assert client.responses.retrieve(running.id).status == "cancelled"  # the replica running it stopped
            WebDriverWait(browser, 20).until(lambda d: not listed(d, running.id))  # its final record is stored
            streaming.close()  # the caller goes away: its foreground response ends, and leaves the roster
            WebDriverWait(browser, 20).until(lambda d: not listed(d, foreground))


def test_with_a_redis_store_a_tool_call_on_one_replica_streams_into_anothers_feed(fleet: Fleet, pair: Pair) -> None:
    fleet.model.scenario = ADDING
    with admin_client(pair.here) as http, http.stream("GET", "/console/live/calls") as stream:
        lines = stream.iter_lines()
        assert next(lines) == "retry: 3000"  # the stream is open: every call from now on is in it
        client = openai.OpenAI(base_url=f"{pair.there}/v1", api_key=CLIENT, max_retries=0, timeout=30)
        done = client.responses.create(model="gpt-oss", input="add them", tools=FIXTURE, store=False)  # type: ignore[arg-type]
        call = json.loads(next(line for line in lines if line.startswith("data: ")).removeprefix("data: "))
        seen = (call["namespace"], call["tool"], call["outcome"], call["response_id"])
        assert seen == ("fixture", "add", "ok", done.id)
        assert call["replica"].startswith("replica_") and call["latency"].endswith(" ms")
        assert f">{done.id}</a>" in http.get("/console/live").text  # kept for a page that loads, too


def test_with_a_redis_store_a_foreground_response_is_listed_with_its_tool_calls_on_another_replica(
    fleet: Fleet, pair: Pair
) -> None:
    fleet.model.scenario = ADD_THEN_SLOW
    client = openai.OpenAI(base_url=f"{pair.there}/v1", api_key=CLIENT, max_retries=0, timeout=30)
    tools = FIXTURE
    with admin_client(pair.here) as http:
        with client.responses.create(
            model="gpt-oss", input="add them", tools=tools, store=False, stream=True
        ) as events:  # type: ignore[arg-type]
            stream = iter(events)
            rid = next(stream).response.id  # response.created
            next(e for e in stream if e.type == "response.output_item.done" and e.item.type == "mcp_call")
            next(e for e in stream if e.type == "response.output_text.delta")  # the long answer is under way

            def counted() -> bool:
                row = _row(http.get("/console/live", params={"q": rid}).text, rid)
                return row is not None and "1 calls" in row

            assert wait_until(counted)  # its tool call, counted by the replica's next renewal
            page = http.get("/console/live", params={"q": rid}).text
            row = _row(page, rid) or ""
            assert "replica_" in row and "this replica" not in row and "gpt-oss" in row
            refused = http.post(f"/console/live/{rid}/cancel", data={"csrf": csrf_of(page)})
            assert refused.status_code == 400 and "only background responses can be cancelled" in refused.text
        assert wait_until(lambda: _row(http.get("/console/live", params={"q": rid}).text, rid) is None)


def test_with_a_redis_store_failed_logins_are_bounded_across_the_replicas(pair: Pair, capsys) -> None:
    """Last in the module: 127.0.0.1 is refused on both replicas afterwards, for a minute."""
    with httpx.Client(trust_env=False) as one, httpx.Client(trust_env=False) as two:
        answer = one.get(f"{pair.there}/console/login")
        for n in range(PER_ADDRESS - 1):  # each refusal's page carries the next form's nonce
            answer = one.post(f"{pair.there}/console/login", data={"csrf": csrf_of(answer.text), "key": f"guess-{n}"})
            assert answer.status_code == 401
        other = two.get(f"{pair.here}/console/login")
        other = two.post(f"{pair.here}/console/login", data={"csrf": csrf_of(other.text), "key": "guess-last"})
        assert other.status_code == 401  # the fifth failure, the first on this replica
        limited = one.post(f"{pair.there}/console/login", data={"csrf": csrf_of(answer.text), "key": ADMIN})
        assert limited.status_code == 429 and 0 < int(limited.headers["retry-after"]) <= 60  # the right key too
    logged = capsys.readouterr().out
    assert "console.login_throttled" in logged and "guess-" not in logged and ADMIN not in logged
