"""You.com's search API (`GET /v1/search` with `X-API-Key`): web results with their snippets."""

from __future__ import annotations

from typing import Any

import httpx

from tools.browser.backends import Hit, SearchOptions
from tools.browser.backends.web import WebSearch, site_query, text


class YouSearch(WebSearch):
    name = "youcom"
    default_url = "https://ydc-index.io/v1/search"

    def request(self, query: str, topn: int, options: SearchOptions) -> httpx.Request:
        params: dict[str, Any] = {"query": site_query(query, options.allowed_domains), "count": topn}
        if country := options.user_location.get("country"):
            params["country"] = country
        return self._build("GET", self.url, params=params, headers={"X-API-Key": self.key})

    def parse(self, body: Any) -> list[Hit]:
        web = body["results"]["web"] if "results" in body else body["hits"]
        return [
            Hit(r["url"], text(r.get("title")), text(" ".join(r.get("snippets") or []) or r.get("description")))
            for r in web
        ]
