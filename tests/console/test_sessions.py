"""The Sessions page against the fleet's real python tool server, in Chromium: a session a key holds is listed
with its owner's fleet name, end-session closes it (its next call starts afresh), a replica that cannot list
its sessions is a message in its own row, and bad input gets a message. No secret reaches the page."""

from __future__ import annotations

import uuid

import httpx
from selenium import webdriver

from orchestrator.guard.auth import key_id
from tests.console.stack import ADMIN, CLIENT, GATEWAY_ADMIN, Fleet, click, csrf_of, log_in, session_client, shot
from tests.support.gateway import call_text, connect
from toolkit.wire import OWNER_HEADER, admin_token, sign_owner


async def test_a_python_session_is_listed_and_ended_from_the_console(fleet: Fleet, browser: webdriver.Chrome) -> None:
    sid = f"console-{uuid.uuid4().hex[:12]}"
    owner = key_id(CLIENT)  # what the orchestrator signs for a call made with the client key
    headers = {"x-session-id": sid, OWNER_HEADER: sign_owner(owner)}
    async with connect(fleet.gateway.url("python"), "streamable-http", headers=headers) as mcp:
        await call_text(mcp, "python", {"code": "kept = 41"})
        log_in(browser, fleet.url, ADMIN)
        browser.get(f"{fleet.url}/console/sessions?q={sid}")
        row = browser.find_element("css selector", "#sessions tbody tr")
        assert sid in row.text and owner in row.text and "python" in row.text and "not sampled" in row.text
        replicas = browser.find_element("id", "replicas").text
        assert f"{fleet.python.url}/mcp" in replicas and "could not be read" in replicas  # the fixture has no list
        shot(browser, "sessions")
        page = browser.page_source
        assert all(secret not in page for secret in (CLIENT, ADMIN, GATEWAY_ADMIN))
        click(browser, "#sessions tbody tr button")
        notice = browser.find_element("css selector", "[role=status]").text
        assert f"Session {sid} of python on {fleet.python.url}/mcp ended." in notice
        assert "No sandbox session is held" in httpx_get(browser, fleet, f"/console/sessions?q={sid}")
        after = await call_text(mcp, "python", {"code": "print(kept)"})
    assert "NameError" in after  # the state went with the session: this call started a fresh one


def httpx_get(browser: webdriver.Chrome, fleet: Fleet, path: str) -> str:
    with session_client(browser, fleet.url) as http:
        return http.get(path).text


def test_bad_input_on_the_sessions_page_gets_a_message(fleet: Fleet, browser: webdriver.Chrome) -> None:
    log_in(browser, fleet.url, ADMIN)
    with session_client(browser, fleet.url) as http:
        token = csrf_of(http.get("/console/sessions").text)
        gone = {"csrf": token, "namespace": "python", "replica": "http://127.0.0.1:9/mcp", "session": "s"}
        moved = http.post("/console/sessions/end", data=gone, follow_redirects=True)
        unknown = http.post("/console/sessions/end", data=gone | {"namespace": "nope"}, follow_redirects=True)
        forged = http.post("/console/sessions/end", data=gone | {"csrf": "0" * 64})
        beyond = http.get("/console/sessions?page=99")
    assert "Session s was not ended" in moved.text and "is not a replica of" in moved.text
    assert "unknown namespace" in unknown.text
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert beyond.status_code == 404 and "There is no page &#39;99&#39; of sessions" in beyond.text


async def test_a_tool_servers_session_list_pages_refuses_bad_input_and_needs_the_fleets_admin_token(
    fleet: Fleet,
) -> None:
    sids = sorted(f"page-{uuid.uuid4().hex[:12]}" for _ in range(2))
    for sid in sids:
        async with connect(fleet.gateway.url("python"), "streamable-http", headers={"x-session-id": sid}) as mcp:
            await call_text(mcp, "python", {"code": "1"})
    auth = {"authorization": f"Bearer {admin_token()}"}
    async with httpx.AsyncClient(base_url=fleet.python.url, trust_env=False, headers=auth) as http:
        first = (await http.get("/admin/sessions", params={"after": "page-", "limit": 1})).json()
        second = (await http.get("/admin/sessions", params={"after": first["next"], "limit": 1})).json()
        bad = [await http.get("/admin/sessions", params=p) for p in ({"limit": 0}, {"limit": 5000}, {"page": 2})]
        no_body = await http.post("/admin/sessions/end", content=b"{}")
        ended = [(await http.post("/admin/sessions/end", json={"session": sid})).json()["ended"] for sid in sids]
        for refused in ({}, {"authorization": f"Bearer {GATEWAY_ADMIN}"}):
            http.headers = httpx.Headers(refused)
            assert (await http.get("/admin/sessions")).status_code == 401
            assert (await http.post("/admin/sessions/end", json={"session": "x"})).status_code == 401
    assert [s["session"] for s in first["sessions"] + second["sessions"]][:2] == sids and first["next"] == sids[0]
    assert first["sessions"][0]["owner"] == "anonymous" and "memory_bytes" not in first["sessions"][0]
    assert [b.status_code for b in bad] == [400, 400, 400] and "limit" in bad[0].json()["error"]["message"]
    assert no_body.status_code == 400 and "session" in no_body.json()["error"]["message"]
    assert ended == [True, True]
