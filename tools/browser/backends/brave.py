"""Brave's web search API (`GET /res/v1/web/search` with `X-Subscription-Token`)."""

from __future__ import annotations

from typing import Any

import httpx

from tools.browser.backends import Hit, SearchOptions
from tools.browser.backends.web import WebSearch, site_query, text


class BraveSearch(WebSearch):
    name = "brave"
    default_url = "https://api.search.brave.com/res/v1/web/search"

    def request(self, query: str, topn: int, options: SearchOptions) -> httpx.Request:
        params: dict[str, Any] = {"q": site_query(query, options.allowed_domains), "count": min(topn, 20)}
        if country := options.user_location.get("country"):
            params["country"] = country
        headers = {"X-Subscription-Token": self.key, "Accept": "application/json"}
        return self._build("GET", self.url, params=params, headers=headers)

    def parse(self, body: Any) -> list[Hit]:
        if body["type"] != "search":
            raise ValueError(f"brave answered a {body['type']!r}, not a search")
        results = (body.get("web") or {}).get("results", [])
        return [Hit(r["url"], text(r.get("title")), text(r.get("description"))) for r in results]
