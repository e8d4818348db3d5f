"""Who opens the console (an admin key, never a client key or none), the cookie, CSRF, the CSP and the bounds on
guessing keys (each replica's, and the fleet's over Redis), in Chromium."""

from __future__ import annotations

import contextlib
import uuid

import httpx
from selenium import webdriver
from structlog.testing import capture_logs

from orchestrator.console.throttle import PER_ADDRESS, FleetThrottle, LoginThrottle
from orchestrator.guard.auth import load_admin_keys, load_keys
from orchestrator.settings import OrchestratorSettings
from tests.console.stack import ADMIN, CLIENT, Fleet, admin_client, csrf_of, log_in, orchestrator, session_client, shot
from tests.support.asgi import free_port
from tests.support.redis import redis_server
from toolkit.redis_client import redis_client


def test_the_keys_file_marks_admin_keys_and_keeps_plain_lines_client_keys(tmp_path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("client-1\nadmin: op-1  # the operator\n# admin:commented\nclient-2\n")
    settings = OrchestratorSettings(api_keys_file=str(keys), admin_keys=["op-2"])
    assert load_keys(settings) == ["client-1", "client-2"]
    assert load_admin_keys(settings) == ["op-2", "op-1"]


def test_no_key_and_a_client_key_are_refused_and_an_admin_key_logs_in(fleet: Fleet, browser: webdriver.Chrome) -> None:
    browser.delete_all_cookies()
    browser.get(f"{fleet.url}/console/live")
    assert browser.current_url == f"{fleet.url}/console/login"  # no session: the login page
    shot(browser, "login")
    log_in(browser, fleet.url, CLIENT)
    assert "That is not an admin key." in browser.find_element("css selector", "[role=alert]").text
    assert browser.get_cookie("toolfleet_console") is None
    log_in(browser, fleet.url, ADMIN)
    assert browser.current_url == f"{fleet.url}/console/fleet"
    cookie = browser.get_cookie("toolfleet_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert ADMIN not in cookie["value"]
    with httpx.Client(base_url=fleet.url, trust_env=False) as http:
        login = http.get("/console/login")
        empty = http.post("/console/login", data={"csrf": csrf_of(login.text), "key": ""})
        assert empty.status_code == 401 and "not an admin key" in empty.text
        assert http.get("/v1/models", headers={"authorization": f"Bearer {ADMIN}"}).status_code == 401


def test_a_post_without_or_with_a_wrong_csrf_token_is_refused(fleet: Fleet, browser: webdriver.Chrome) -> None:
    log_in(browser, fleet.url, ADMIN)
    with session_client(browser, fleet.url) as http:
        token = csrf_of(http.get("/console/live").text)
        for form in ({}, {"csrf": "0" * 64}):
            refused = http.post("/console/approvals/fixture/approve", data=form)
            assert refused.status_code == 403 and "CSRF" in refused.text
            assert http.post("/console/logout", data=form).headers["location"] == "/console/login"
        assert http.get("/console/fleet").status_code == 200  # the refused logouts did nothing
        forged_login = http.post("/console/login", data={"csrf": "x", "key": ADMIN})
        assert forged_login.status_code == 403 and "CSRF" in forged_login.text
        out = http.post("/console/logout", data={"csrf": token}, follow_redirects=False)
        assert out.status_code == 303 and 'toolfleet_console=""' in out.headers["set-cookie"]


def test_every_console_response_carries_a_strict_csp_and_no_third_party_asset(fleet: Fleet) -> None:
    with httpx.Client(base_url=fleet.url, trust_env=False) as http:
        for path in ("/console/login", "/console/fleet", "/console/static/console.css", "/console/nope"):
            headers = http.get(path).headers
            csp = headers["content-security-policy"]
            assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
            assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"
        page = http.get("/console/login").text
    assert "<script" not in page and "http://" not in page and "https://" not in page


def test_login_failures_are_bounded_per_address_and_over_all_addresses_in_bounded_memory() -> None:
    now = [1000.0]
    throttle = LoginThrottle(per_address=3, overall=5, window_s=60, addresses=2, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.retry_after("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
    assert throttle.retry_after("10.0.0.1") == 60 and throttle.retry_after("10.0.0.2") == 0
    now[0] += 59.5
    assert throttle.retry_after("10.0.0.1") == 1  # whole seconds, rounded up
    now[0] += 0.5
    assert throttle.retry_after("10.0.0.1") == 0  # the window slid past the first failure
    for address in ("10.0.0.2", "10.0.0.3", "10.0.0.2", "10.0.0.3", "10.0.0.5"):
        throttle.failed(address)  # five failures in the window, none past its address's bound: everyone waits
    assert throttle.retry_after("10.0.0.4") == 60 and throttle.retry_after("10.0.0.2") == 60
    assert len(throttle._by_address) == 2  # the address failing least recently was forgotten


async def test_fleet_login_counts_fall_back_to_each_replicas_own_while_redis_is_away() -> None:
    port, prefix = free_port(), f"throttle-{uuid.uuid4().hex[:8]}:"
    with capture_logs() as logs, contextlib.ExitStack() as outage:
        client = redis_client(outage.enter_context(redis_server(port)))
        one, two = (FleetThrottle(LoginThrottle(per_address=2), client, prefix) for _ in range(2))  # two replicas
        try:
            await one.failed("10.0.0.1")
            await two.failed("10.0.0.1")  # one failure on each: the fleet's bound of two is reached
            assert 0 < await one.retry_after("10.0.0.1") <= 60 and 0 < await two.retry_after("10.0.0.1") <= 60
            assert await one.retry_after("10.0.0.2") == 0
            outage.close()  # Redis gone
            assert await one.retry_after("10.0.0.1") == 0  # not locked out: this replica saw one failure
            await one.failed("10.0.0.1")
            assert 0 < await one.retry_after("10.0.0.1") <= 60  # nor the door opened: its own bound holds
        finally:
            await client.aclose()
    assert [e["event"] for e in logs].count("console.login_counts_local") == 1  # once for the whole outage


def test_a_client_address_past_its_failed_logins_gets_429_with_retry_after(fleet: Fleet, capsys) -> None:
    with httpx.Client(trust_env=False) as probe:
        worker = probe.get(f"{fleet.url}/healthz").json()["workers"][0]["url"]
    with orchestrator(worker, None) as url, httpx.Client(base_url=url, trust_env=False) as http:
        answer = http.get("/console/login")
        for n in range(PER_ADDRESS):  # each refusal's page carries the next form's nonce
            answer = http.post("/console/login", data={"csrf": csrf_of(answer.text), "key": f"guess-{n}"})
            assert answer.status_code == 401
        limited = http.post("/console/login", data={"csrf": csrf_of(answer.text), "key": ADMIN})  # the right key too
        assert limited.status_code == 429 and 0 < int(limited.headers["retry-after"]) <= 60
        assert "Too many failed logins" in limited.text and limited.cookies.get("toolfleet_console") is None
    logged = capsys.readouterr().out
    assert "console.login_throttled" in logged and "guess-" not in logged and ADMIN not in logged


def test_a_notice_comes_from_the_console_never_from_a_link(fleet: Fleet) -> None:
    """A notice rides a cookie from the action to the next page, shown once: a link someone sends an operator
    cannot put their words on a console page."""
    with admin_client(fleet.url) as http:
        page = http.get("/console/live", params={"notice": "Call 555-0100 to re-verify your key"}).text
        assert "555-0100" not in page
        out = http.post("/console/logout", data={"csrf": csrf_of(page)}, follow_redirects=True)
        assert out.url.path == "/console/login" and "Logged out." in out.text
        assert "Logged out." not in http.get("/console/login").text
