"""The Live page's recent tool calls: one made while the page is open streams in over SSE in Chromium (the
script runs under the strict CSP, with no error in the browser's log) and is listed, without script, on reload,
where the table filters and sorts by query parameters; the streams a replica holds open are bounded."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import openai
from selenium import webdriver
from selenium.webdriver.support.ui import WebDriverWait

from orchestrator.callfeed import WATCHERS
from orchestrator.worker.scripted import Scenario
from tests.console.stack import ADMIN, CLIENT, Fleet, admin_client, log_in, session_client, shot
from tests.support.service import wait_until

ADD = '<|channel|>commentary to=fixture.add <|constrain|>json<|message|>{"a": 2, "b": 3}<|call|>'
DONE = "<|channel|>final<|message|>It is 5.<|return|>"
FIXTURE = [{"type": "mcp", "server_label": "fixture", "require_approval": "never"}]
RULES = [{"match": r"fixture\.add to=assistant", "reply": DONE}, {"match": "add them", "reply": ADD}]
ADDING = Scenario.from_dict({"rules": RULES, "default": DONE})  # "add them": one call of fixture's add, then 5


def test_a_tool_call_made_while_the_live_page_is_open_streams_in(fleet: Fleet, browser: webdriver.Chrome) -> None:
    fleet.model.scenario = ADDING
    log_in(browser, fleet.url, ADMIN)
    browser.get_log("browser")  # what earlier pages logged
    browser.get(f"{fleet.url}/console/live")
    status = browser.find_element("id", "calls-status")
    WebDriverWait(browser, 20).until(lambda _: status.text.startswith("Streaming"))  # the script's EventSource
    client = openai.OpenAI(base_url=f"{fleet.url}/v1", api_key=CLIENT, max_retries=0, timeout=30)
    # unstored: its tool session ends with it, so the package's other tests count the sessions they open alone
    done = client.responses.create(model="gpt-oss", input="add them", tools=FIXTURE, store=False)  # type: ignore[arg-type]
    assert done.output_text == "It is 5."
    rows = WebDriverWait(browser, 20).until(lambda d: d.find_elements("css selector", "#calls-body tr.fresh"))
    cells = [c.text for c in rows[0].find_elements("tag name", "td")]
    assert cells[1:3] == ["fixture", "add"] and cells[3].endswith(" ms") and cells[4] == "ok"
    assert cells[0].endswith(" ago") and cells[6] == done.id
    assert rows[0].find_element("tag name", "time").get_attribute("title").endswith(" UTC")  # absolute on hover
    shot(browser, "live-feed")
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []  # no CSP refusal, no error
    with session_client(browser, fleet.url) as http:
        reloaded = http.get("/console/live").text  # as a browser without JavaScript reads it
        assert http.get("/console/static/live.js").headers["content-type"].startswith("text/javascript")
        found = http.get("/console/live", params={"cq": "ADD", "csort": "latency_ms", "cdesc": "false"}).text
        missed = http.get("/console/live", params={"cq": "no-such-tool"}).text
    assert f">{done.id}</a>" in reloaded and "<td>fixture</td><td>add</td>" in reloaded
    assert 'data-stream="/console/live/calls"' in reloaded  # the view the script streams into
    assert f">{done.id}</a>" in found and "data-stream" not in found and 'aria-sort="ascending"' in found
    assert f">{done.id}</a>" not in missed and "No tool call matching no-such-tool has finished" in missed


def test_past_32_open_streams_of_tool_calls_a_new_one_is_a_503_until_one_closes(fleet: Fleet) -> None:
    limits = httpx.Limits(max_connections=WATCHERS + 2)
    with admin_client(fleet.url) as login, contextlib.ExitStack() as streams:
        cookies = dict(login.cookies)
        http = streams.enter_context(httpx.Client(base_url=fleet.url, cookies=cookies, limits=limits, trust_env=False))
        opened: list[tuple[contextlib.ExitStack, Iterator[str]]] = []  # a line iterator dropped closes its stream
        for _ in range(WATCHERS + 1):  # a browser left on the Live page by another test may hold one already
            stream = streams.enter_context(contextlib.ExitStack())
            answer = stream.enter_context(http.stream("GET", "/console/live/calls"))
            if answer.status_code != 200:
                break
            lines = answer.iter_lines()
            assert next(lines) == "retry: 3000"  # watching from now on
            opened.append((stream, lines))
        assert answer.status_code == 503 and len(opened) >= WATCHERS - 1
        assert f"{WATCHERS} streams of tool calls are open on this replica already" in answer.read().decode()
        opened.pop()[0].close()  # one closes: room for one more, once the replica has seen it go

        def reopened() -> bool:
            with http.stream("GET", "/console/live/calls") as again:
                return again.status_code == 200 and next(again.iter_lines()) == "retry: 3000"

        assert wait_until(reopened)
