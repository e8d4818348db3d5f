"""Fleet-wide Live: a background response running on one orchestrator replica is listed by another replica's
console (the two share a store) and cancelled from there, through the shared store."""

from __future__ import annotations

import tempfile

import httpx
import openai
from selenium import webdriver
from selenium.webdriver.support.ui import WebDriverWait

from orchestrator.worker.scripted import Scenario
from tests.console.stack import ADMIN, CLIENT, Fleet, click, log_in, orchestrator, session_client

SLOW = "<|channel|>final<|message|>" + "slow " * 5000 + "<|return|>"


def test_another_replicas_background_response_is_listed_and_cancelled_here(
    fleet: Fleet, browser: webdriver.Chrome
) -> None:
    fleet.model.scenario = Scenario.from_dict({"rules": [], "default": SLOW, "token_delay_s": 0.01})
    with httpx.Client(trust_env=False) as probe:
        worker = probe.get(f"{fleet.url}/healthz").json()["workers"][0]["url"]
    with tempfile.TemporaryDirectory(prefix="toolfleet-console-shared-") as scratch:
        store = f"{scratch}/store.sqlite3"
        with orchestrator(worker, None, store) as there, orchestrator(worker, None, store) as here:
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
            with session_client(browser, here) as http:
                assert running.id not in http.get("/console/live").text
            browser.get("about:blank")  # the Live page's event stream closed before its replica stops
