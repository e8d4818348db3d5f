"""The shape every web search API backend shares: one HTTPS request, one parse of its JSON body.

A backend names its default endpoint and says how to build its request and read its answer; the
base owns the client, the time limit and the translation of every failure to `SearchUnavailable`.
The endpoint is the operator's (not the model's), so it is not behind the SSRF guard.
"""

from __future__ import annotations

import abc
import html
import re
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx

from tools.browser.backends import Hit, SearchOptions, SearchUnavailable
from tools.browser.settings import BrowserSettings

_TAG = re.compile(r"<[^>]+>")


def in_domains(url: str, domains: tuple[str, ...]) -> bool:
    """True when `url`'s host is one of `domains` or below one (empty = every domain).

    Every hit of every search passes here, most with no domains asked for: those parse no URL."""
    if not domains:
        return True
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d or host.endswith("." + d) for d in domains)


class WebSearch(abc.ABC):
    """A search API: subclasses say how to ask (`request`) and how to read the answer (`parse`)."""

    name: ClassVar[str]
    default_url: ClassVar[str]
    needs_key: ClassVar[bool] = True

    def __init__(self, settings: BrowserSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        if self.needs_key and not settings.search_api_key:
            raise ValueError(f"the {self.name} backend needs --search-api-key (TOOLFLEET_BROWSER_SEARCH_API_KEY)")
        self.url = settings.search_url or self.default_url
        self.key = settings.search_api_key or ""
        self._client = httpx.AsyncClient(timeout=settings.search_timeout_s, transport=transport, trust_env=False)

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        await self._client.aclose()

    @abc.abstractmethod
    def request(self, query: str, topn: int, options: SearchOptions) -> httpx.Request: ...

    @abc.abstractmethod
    def parse(self, body: Any) -> list[Hit]:
        """Hits from the decoded JSON body; a body of another shape raises KeyError / TypeError."""

    async def search(self, query: str, topn: int, options: SearchOptions) -> list[Hit]:
        try:
            response = await self._client.send(self.request(query, topn, options))
        except httpx.TimeoutException as exc:
            raise SearchUnavailable(f"the {self.name} search did not answer in time") from exc
        except httpx.HTTPError as exc:
            raise SearchUnavailable(f"the {self.name} search is unreachable: {exc}") from exc
        if response.status_code != 200:
            raise SearchUnavailable(f"the {self.name} search answered HTTP {response.status_code}")
        try:
            hits = self.parse(response.json())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SearchUnavailable(f"the {self.name} search answered something that is not a result list") from exc
        web = [h for h in hits if h.url.startswith(("http://", "https://"))]
        return [h for h in web if in_domains(h.url, options.allowed_domains)][:topn]

    def _build(self, method: str, url: str, **kwargs: Any) -> httpx.Request:
        return self._client.build_request(method, url, **kwargs)


def site_query(query: str, domains: tuple[str, ...]) -> str:
    """`query (site:a OR site:b)`: how engines without a domain filter are asked for only those domains."""
    if not domains:
        return query
    return f"{query} (" + " OR ".join(f"site:{d}" for d in domains) + ")"


def text(value: Any) -> str:
    """A title or snippet as plain text: the highlighting tags some APIs add removed, entities decoded."""
    return " ".join(html.unescape(_TAG.sub("", str(value or ""))).split())
