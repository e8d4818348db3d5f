"""The real browser server (a subprocess) over both MCP transports: what the model reads, and each tool."""

from __future__ import annotations

import os
import uuid

import httpx
import pytest
from mcp.client.session import ClientSession
from openai_harmony import ToolNamespaceConfig

from tests.support.gateway import eventually
from tests.support.mcp1 import arun_mcp1_client
from tests.support.mcp2 import TRANSPORTS, mcp_session
from tests.support.service import Service


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


def sid() -> dict[str, str]:
    return {"x-session-id": f"test-{uuid.uuid4().hex[:8]}"}


async def call(session: ClientSession, name: str, **args: object):
    result = await session.call_tool(name, args)
    assert not result.is_error, result.content[0].text
    return result.content[0].text, result.structured_content


async def error(session: ClientSession, name: str, **args: object) -> str:
    result = await session.call_tool(name, args)
    assert result.is_error, result.content[0].text
    return result.content[0].text


async def test_the_model_reads_harmonys_browser_description_and_schemas(browser: Service, transport: str) -> None:
    config = ToolNamespaceConfig.browser()
    async with mcp_session(browser.url, transport) as session:
        init = await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert init.server_info.name == "browser"
    assert init.instructions == config.description
    for spec in config.tools:
        assert tools[spec.name].description == spec.description
        schema = dict(tools[spec.name].input_schema)
        handle = schema["properties"].get("session_handle")  # for clients without x-session-id; never on SSE (vLLM)
        assert (handle is None) == (transport == "sse")
        if handle is not None:
            assert handle["x-mcp-header"] == "Session-Handle" and "30 minutes" in handle["description"]
            schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "session_handle"}
        assert schema == spec.parameters
    assert tools["cleanup_session"].meta == {"include_in_prompt": False}


async def test_search_open_follow_scroll_and_find_with_structured_results(browser: Service, transport: str) -> None:
    async with mcp_session(browser.url, transport, sid()) as s:
        text, st = await call(s, "search", query="partly oxidised oolong", topn=5)
        assert text.startswith("[0] partly oxidised oolong\n**viewing lines [0 - ")
        assert st["hits"][0]["url"] == "corpus://local/guide/tea.html" and st["hits"][0]["title"] == "Corpus tea guide"
        text, st = await call(s, "open", id=0)
        assert text.startswith("[1] Corpus tea guide (corpus://local/guide/tea.html)\n")
        assert st == {
            "cursor": 1,
            "url": "corpus://local/guide/tea.html",
            "title": "Corpus tea guide",
            "lines": [0, 2],
            "total_lines": 3,
        }
        text, st = await call(s, "open", id=0, cursor=1)  # the corpus page's relative link
        assert st["url"] == "corpus://local/notes/kettle.md" and st["title"] == "Kettle notes"
        text, st = await call(s, "search", query="samovars", topn=1.0)  # the schema's `number`
        assert len(st["hits"]) == 1 and st["hits"][0]["url"].endswith("plain.txt")
        # topn is honoured; each search keeps its own page under its own cursor
        first, _ = await call(s, "open", cursor=0, loc=0)
        assert "oolong" in first and "samovars" not in first


async def test_a_web_page_scrolls_finds_across_the_wrap_and_shows_its_source(
    browser: Service, web: str, transport: str
) -> None:
    async with mcp_session(browser.url, transport, sid()) as s:
        text, st = await call(s, "open", id=f"{web}/tea")
        assert st["title"] == "Tea facts" and st["url"] == f"{web}/tea"
        assert "script text" not in text and "〖like these〗" in text and "[Image 1: a cup of tea]" in text
        assert "【1†encyclopedia†en.wikipedia.org】" in text
        _, more = await call(s, "open")  # no id, no loc: the next view of the same page
        assert more["lines"][0] == st["lines"][1] + 1
        _, short = await call(s, "open", cursor=0, loc=2, num_lines=3)
        assert short["lines"] == [2, 4]
        text, found = await call(s, "find", pattern="quite particular", cursor=0)
        assert found["url"] == f"{web}/tea" and found["title"] == "Tea facts" and found["pattern"] == "quite particular"
        assert text.startswith(f"[{found['cursor']}] Find results for text: `quite particular` in `Tea facts`")
        # a phrase cut by the wrap at 80 columns
        lines = (await call(s, "open", cursor=0, loc=10, num_lines=2))[0].splitlines()[3:]
        tail, head = lines[0].split()[-1], lines[1].split()[1]
        text, _ = await call(s, "find", pattern=f"{tail} {head}", cursor=0)
        assert "【0†match at L10】" in text
        _, back = await call(s, "open", id=0)  # a find result links to its line of the page
        assert back["lines"][0] == 10 and back["url"] == f"{web}/tea"
        text, src = await call(s, "open", cursor=0, view_source=True, num_lines=5)
        assert text.startswith(f"[{src['cursor']}] Source of Tea facts ({web}/tea)") and "<!doctype html>" in text


BAD = [
    ("search", {"query": "   "}, "query is empty"),
    ("search", {"query": "tea", "source": "news"}, "only source is `web`"),
    ("open", {"cursor": 99}, "no page at cursor 99"),
    ("open", {"id": 42, "cursor": 0}, "link 42 does not exist"),
    ("open", {"cursor": 0, "loc": 10_000}, "outside the page"),
    ("open", {"cursor": 0, "num_lines": 0}, "num_lines must be at least 1"),
    ("open", {"cursor": 0, "loc": 1.5}, "whole number"),
    ("open", {"id": "tea.html"}, "not a full URL"),
    ("open", {"id": "ftp://127.0.0.1/x"}, "only http and https"),
    ("open", {"id": "corpus://local/../../../etc/passwd.txt"}, "only http and https"),  # not a corpus file
    ("find", {"pattern": "    "}, "pattern is empty"),
    ("find", {"pattern": "oolong", "cursor": 1}, "not search results"),
    ("find", {"pattern": "no such phrase anywhere", "cursor": 0}, "no match"),
]


async def test_bad_calls_get_an_error_the_model_can_act_on_and_the_server_keeps_serving(
    browser: Service, web: str, transport: str
) -> None:
    async with mcp_session(browser.url, transport, sid()) as s:
        assert "no page is open yet" in await error(s, "open", loc=3)
        await call(s, "open", id=f"{web}/coffee")
        await call(s, "search", query="oolong")
        for name, args, expected in BAD:
            assert expected in await error(s, name, **args), (name, args)
        assert "already reaches the end" in await error(s, "open", cursor=0)
        text, _ = await call(s, "open", cursor=0, loc=0)
        assert "Coffee is brewed" in text


FETCH_FAULTS = [
    ("/loop", "too many redirects"),
    ("/slow", "did not answer within 3 s"),
    ("/bomb", "larger than the 5 MiB limit"),
    ("/huge", "larger than the 5 MiB limit"),
    ("/binary", "application/octet-stream, not a page"),
    ("/nul", "binary data"),
    ("/broken", "HTTP 500"),
    ("/missing-page", "HTTP 404"),
]


@pytest.mark.parametrize(("path", "expected"), FETCH_FAULTS)
async def test_faulty_pages_are_tool_errors(browser: Service, web: str, path: str, expected: str) -> None:
    async with mcp_session(browser.url, "streamable-http", sid()) as s:
        assert expected in await error(s, "open", id=f"{web}{path}")
        text, _ = await call(s, "open", id=f"{web}/chain/4")  # five redirects are fine
        assert text.startswith("[0] Tea facts")


async def test_non_utf8_pages_are_decoded_by_declaration_bom_or_the_web_default(browser: Service, web: str) -> None:
    async with mcp_session(browser.url, "sse", sid()) as s:
        text, st = await call(s, "open", id=f"{web}/latin1")
        assert st["title"] == "Café" and "crème brûlée" in text
        text, st = await call(s, "open", id=f"{web}/cp1252")  # no charset anywhere
        assert st["title"] == "Café menu" and "crème brûlée € 5" in text
        text, _ = await call(s, "open", id=f"{web}/utf16")
        assert "Über Tee: grün, schwarz" in text


async def test_sessions_are_isolated_and_cleanup_session_frees_the_pages(browser: Service, web: str) -> None:
    a, b = sid(), sid()
    async with mcp_session(browser.url, "streamable-http", a) as sa, mcp_session(browser.url, "sse", b) as sb:
        await call(sa, "open", id=f"{web}/tea")
        assert "no page is open yet" in await error(sb, "open", cursor=0)
        await call(sb, "open", id=f"{web}/coffee")
        assert (await call(sa, "open", cursor=0, loc=0))[1]["title"] == "Tea facts"
        assert (await call(sb, "open", cursor=0, loc=0))[1]["title"] == "Coffee facts"
        cleaned = await sa.call_tool("cleanup_session", {})
        assert cleaned.content[0].text == f"session {a['x-session-id']} cleaned up"
        assert "no page is open yet" in await error(sa, "open", cursor=0)
        assert (await call(sb, "open", cursor=0, loc=0))[1]["title"] == "Coffee facts"


async def test_an_mcp_1x_client_browses_over_sse(browser: Service, web: str) -> None:
    ops = [
        {"op": "list_tools"},
        ["call_tool", "open", {"id": f"{web}/tea"}],
        ["call_tool", "find", {"pattern": "oxidised"}],
        ["call_tool", "cleanup_session", {}],
    ]
    out = await arun_mcp1_client(browser.url + "/sse", ops, transport="sse", headers=sid())
    assert out["server_info"]["name"] == "browser"
    assert {t["name"] for t in out["results"][0]["tools"]} >= {"search", "open", "find", "cleanup_session"}
    opened = out["results"][1]["result"]
    assert opened["structuredContent"]["title"] == "Tea facts"
    assert "Black tea is oxidised" in out["results"][2]["result"]["content"][0]["text"]


async def test_failed_fetches_leave_no_sockets_or_sessions_behind(browser: Service, web: str) -> None:
    def fds() -> int:
        return len(os.listdir(f"/proc/{browser.proc.pid}/fd"))

    async with mcp_session(browser.url, "streamable-http", sid()) as s:
        await call(s, "open", id=f"{web}/tea")  # the fetcher's pooled connection exists before counting
        before = fds()
        for _ in range(5):
            for path in ("/loop", "/bomb", "/broken", "/binary", "/nul"):
                await error(s, "open", id=f"{web}{path}")
        after = fds()
        await s.call_tool("cleanup_session", {})
    assert after - before <= 3, (before, after)  # 25 failed fetches: no socket each
    async with httpx.AsyncClient(timeout=5) as client:
        assert (await client.get(f"{browser.url}/healthz")).json()["status"] == "ok"


async def test_an_idle_session_is_reaped_after_the_ttl(web: str, corpus_dir, tmp_path) -> None:
    from tests.browser.web import browser_args
    from tests.support.service import running_service

    args = browser_args(web, corpus_dir, tmp_path / "index", "--session-ttl-s", "1", "--reap-interval-s", "0.2")
    with running_service(args) as svc:
        headers = sid()
        async with mcp_session(svc.url, "streamable-http", headers) as s:
            await call(s, "open", id=f"{web}/coffee")
        await eventually(lambda: httpx.get(f"{svc.url}/healthz").json()["sessions"] == 0, what="the reap")
        async with mcp_session(svc.url, "streamable-http", headers) as s:
            assert "no page is open yet" in await error(s, "open", cursor=0)
            text, _ = await call(s, "open", id=f"{web}/coffee")  # the error above did not use up the notice
            assert text.startswith("[this session's state was reaped after ") and " seconds idle" in text
            again, _ = await call(s, "find", pattern="coffee")
            assert "state was" not in again
            await call(s, "cleanup_session")
            text, _ = await call(s, "open", id=f"{web}/coffee")
            assert "state was" not in text  # a deliberate end is not a reset to report
        assert "session.reaped" in svc.log()
