"""A self-hosted SearXNG through its JSON API (`/search?format=json`; enable `json` in its settings.yml)."""

from __future__ import annotations

from typing import Any

import httpx

from tools.browser.backends import Hit, SearchOptions
from tools.browser.backends.web import WebSearch, site_query, text


class SearxngSearch(WebSearch):
    name = "searxng"
    default_url = "http://127.0.0.1:8888/search"
    needs_key = False

    def request(self, query: str, topn: int, options: SearchOptions) -> httpx.Request:
        params = {"q": site_query(query, options.allowed_domains), "format": "json"}
        if country := options.user_location.get("country"):
            params["language"] = f"all-{country}"
        return self._build("GET", self.url, params=params)

    def parse(self, body: Any) -> list[Hit]:
        return [Hit(r["url"], text(r.get("title")), text(r.get("content"))) for r in body["results"]]
