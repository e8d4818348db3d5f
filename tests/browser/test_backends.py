"""The web search backends against response bodies stored under tests/browser/recorded/ (never the network).

The bodies follow each service's documented JSON response (extra fields included, as the services
send them); a MockTransport answers the backend's real request, which the tests check too.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tools.browser.backends import BACKENDS, SearchOptions, SearchUnavailable, load_backend
from tools.browser.settings import BrowserSettings

RECORDED = Path(__file__).parent / "recorded"
WEB = ("searxng", "exa", "youcom", "brave")
CHECKS: dict[str, Callable[[httpx.Request], None]] = {
    "searxng": lambda r: (r.url.params["format"] == "json" and r.url.params["q"].startswith("green tea")) or _fail(r),
    "exa": lambda r: (r.headers["x-api-key"] == "k" and json.loads(r.content)["numResults"] == 5) or _fail(r),
    "youcom": lambda r: (r.headers["x-api-key"] == "k" and r.url.params["count"] == "5") or _fail(r),
    "brave": lambda r: (r.headers["x-subscription-token"] == "k" and r.url.params["count"] == "5") or _fail(r),
}


def _fail(request: httpx.Request) -> None:
    raise AssertionError(f"unexpected request {request.method} {request.url} {request.headers}")


def backend(name: str, handler: Callable[[httpx.Request], httpx.Response]):
    """The named backend, its HTTP answered by `handler` (passed in through the constructor)."""
    module, _, cls = BACKENDS[name].partition(":")
    settings = BrowserSettings(search_api_key="k")
    return getattr(importlib.import_module(module), cls)(settings, transport=httpx.MockTransport(handler))


def recorded(name: str) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        CHECKS[name](request)
        return httpx.Response(200, content=(RECORDED / f"{name}.json").read_bytes())

    return handler


@pytest.mark.parametrize("name", WEB)
async def test_recorded_answers_become_hits_with_url_title_and_snippet(name: str) -> None:
    b = backend(name, recorded(name))
    hits = await b.search("green tea", 5, SearchOptions())
    await b.aclose()
    assert hits[0].url == "https://en.wikipedia.org/wiki/Green_tea"
    assert "Green tea" in hits[0].title and "Camellia sinensis" in hits[0].snippet
    assert len(hits) == 2 and all(h.url.startswith("https://") for h in hits)  # searxng's magnet: link dropped
    assert "<strong>" not in hits[0].snippet  # brave decorates its descriptions


@pytest.mark.parametrize("name", WEB)
async def test_allowed_domains_reach_the_request_and_filter_the_hits(name: str) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=(RECORDED / f"{name}.json").read_bytes())

    b = backend(name, handler)
    hits = await b.search("green tea", 5, SearchOptions(allowed_domains=("wikipedia.org",)))
    await b.aclose()
    assert [h.url for h in hits] == ["https://en.wikipedia.org/wiki/Green_tea"]
    sent = seen[0].content.decode() + str(seen[0].url)
    assert "wikipedia.org" in sent  # includeDomains for exa, site: for the others


FAULTS = {
    "garbage": lambda r: httpx.Response(200, content=b"<html>not json</html>"),
    "wrong shape": lambda r: httpx.Response(200, json={"unexpected": True}),
    "unauthorized": lambda r: httpx.Response(401, json={"error": "bad key"}),
    "timeout": lambda r: (_ for _ in ()).throw(httpx.ReadTimeout("slow", request=r)),
    "unreachable": lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused", request=r)),
}


@pytest.mark.parametrize("name", WEB)
@pytest.mark.parametrize("fault", FAULTS)
async def test_a_failing_backend_is_search_unavailable_with_a_reason(name: str, fault: str) -> None:
    b = backend(name, FAULTS[fault])
    with pytest.raises(SearchUnavailable, match=name):
        await b.search("green tea", 5, SearchOptions())
    await b.aclose()


def test_backends_are_chosen_by_name_and_paid_ones_need_a_key() -> None:
    with pytest.raises(ValueError, match="unknown search backend 'bing'"):
        load_backend("bing", BrowserSettings())
    for name in ("exa", "youcom", "brave"):
        with pytest.raises(ValueError, match="needs --search-api-key"):
            load_backend(name, BrowserSettings())
    assert type(load_backend("searxng", BrowserSettings())).__name__ == "SearxngSearch"


async def test_the_server_searches_through_the_backend_its_flag_names(tmp_path: Path) -> None:
    """`--search-backend searxng --search-url ...`: a SearXNG stand-in on 127.0.0.1 answers the stored body."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from tests.support.asgi import serve_asgi
    from tests.support.mcp2 import mcp_session
    from tests.support.service import running_service

    async def searx(request: Request) -> Response:
        assert request.query_params["format"] == "json"
        return Response((RECORDED / "searxng.json").read_bytes(), media_type="application/json")

    with serve_asgi(Starlette(routes=[Route("/search", searx)])) as searxng:
        args = [
            "-m",
            "tools.browser",
            "--search-backend",
            "searxng",
            "--search-url",
            f"{searxng}/search",
            "--index-dir",
            str(tmp_path / "index"),
            "--default-corpus-dir",
            str(tmp_path / "none"),
        ]
        with running_service(args) as svc:
            async with mcp_session(svc.url, "sse", {"x-session-id": "searx"}) as s:
                result = await s.call_tool("search", {"query": "green tea"})
    assert not result.is_error, result.content[0].text
    assert [h["url"] for h in result.structured_content["hits"]][:1] == ["https://en.wikipedia.org/wiki/Green_tea"]
    assert "【0†Green tea - Wikipedia†en.wikipedia.org】" in result.content[0].text
