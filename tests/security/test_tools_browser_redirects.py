"""A request's `allowed_domains` hold on every redirect hop, as the SSRF guard does (issue 32, finding 11).

A page inside the allowed domains used to send the browser anywhere with one redirect. The real browser server
(a subprocess) fetches from the fixture web on 127.0.0.1, which answers as `127.0.0.1` and as `localhost` (both
exempt from the SSRF guard here, so only the domain rule can refuse); the client is the real MCP SDK.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.web import browser_args, web_app, write_corpus
from tests.support.asgi import serve_asgi
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service

INSIDE = "127.0.0.1"


@pytest.fixture(scope="module")
def web() -> Iterator[str]:
    with serve_asgi(web_app()) as url:
        yield url


@pytest.fixture(scope="module")
def browser(web: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"))
    args = browser_args(web, corpus, Path(tmp_path_factory.mktemp("index")), "--drain-s", "0")
    exempt = args.index("--ssrf-exempt-hosts") + 1
    args[exempt] += f",localhost:{web.rsplit(':', 1)[1]}"
    with running_service(args) as svc:
        yield svc


def headers(domains: str | None) -> dict[str, str]:
    sid = {"x-session-id": f"redirects-{uuid.uuid4().hex[:8]}"}
    return sid if domains is None else {**sid, "x-browser-allowed-domains": domains}


def outside(web: str) -> str:
    """A URL on the fixture web that redirects to its `localhost` spelling: outside `INSIDE`."""
    return f"{web}/to?url=http://localhost:{web.rsplit(':', 1)[1]}/coffee"


async def test_a_redirect_outside_the_allowed_domains_is_refused_naming_its_target(web: str, browser: Service) -> None:
    async with mcp_session(browser.url, "streamable-http", headers(INSIDE)) as session:
        result = await session.call_tool("open", {"id": outside(web)})
    text = result.content[0].text
    assert result.is_error, text
    assert "redirected to http://localhost:" in text and "localhost is outside the domains" in text, text
    assert "Coffee" not in text


async def test_redirects_inside_the_allowed_domains_are_followed(web: str, browser: Service) -> None:
    async with mcp_session(browser.url, "streamable-http", headers(INSIDE)) as session:
        result = await session.call_tool("open", {"id": f"{web}/chain/2"})
    assert not result.is_error and "Tea facts" in result.content[0].text, result.content[0].text


async def test_a_page_cached_through_a_redirect_is_not_shown_to_a_call_that_allows_less(
    web: str, browser: Service
) -> None:
    """The session's page cache keeps where a redirect landed: a later call of narrower domains refetches."""
    sid = headers(None)
    async with mcp_session(browser.url, "streamable-http", sid) as session:
        opened = await session.call_tool("open", {"id": outside(web)})
        assert not opened.is_error and "Coffee facts" in opened.content[0].text
    async with mcp_session(browser.url, "streamable-http", {**sid, "x-browser-allowed-domains": INSIDE}) as session:
        again = await session.call_tool("open", {"id": outside(web)})
    assert again.is_error and "localhost is outside the domains" in again.content[0].text, again.content[0].text
