"""Exa's search API (`POST /search` with `x-api-key`), asking for highlights as snippets."""

from __future__ import annotations

from typing import Any

import httpx

from tools.browser.backends import Hit, SearchOptions
from tools.browser.backends.web import WebSearch, text


class ExaSearch(WebSearch):
    name = "exa"
    default_url = "https://api.exa.ai/search"

    def request(self, query: str, topn: int, options: SearchOptions) -> httpx.Request:
        body: dict[str, Any] = {"query": query, "numResults": topn, "contents": {"highlights": True}}
        if options.allowed_domains:
            body["includeDomains"] = list(options.allowed_domains)
        if country := options.user_location.get("country"):
            body["userLocation"] = country
        return self._build("POST", self.url, json=body, headers={"x-api-key": self.key})

    def parse(self, body: Any) -> list[Hit]:
        hits = []
        for r in body["results"]:
            snippet = " … ".join(r.get("highlights") or []) or (r.get("text") or "")[:400]
            hits.append(Hit(r["url"], text(r.get("title")) or r["url"], text(snippet)))
        return hits
