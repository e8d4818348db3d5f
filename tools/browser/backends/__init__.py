"""Search backends, chosen by configuration name and imported lazily (local needs no key, the others no index)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from toolkit import registry
from tools.browser.settings import BrowserSettings

BACKENDS: registry.Registry = {
    "local": "tools.browser.backends.local:LocalIndex",
    "searxng": "tools.browser.backends.searxng:SearxngSearch",
    "exa": "tools.browser.backends.exa:ExaSearch",
    "youcom": "tools.browser.backends.youcom:YouSearch",
    "brave": "tools.browser.backends.brave:BraveSearch",
}


@dataclass(frozen=True)
class Hit:
    url: str
    title: str
    snippet: str


@dataclass(frozen=True)
class SearchOptions:
    """What the request asks of a search: only these domains (empty = any), near this place."""

    allowed_domains: tuple[str, ...] = ()
    user_location: dict[str, Any] = field(default_factory=dict)


class SearchUnavailable(Exception):
    """The backend failed (down, timed out, answered garbage): our side broke, the model may retry later."""


class SearchBackend(Protocol):
    async def start(self) -> None: ...
    async def search(self, query: str, topn: int, options: SearchOptions) -> list[Hit]: ...
    async def aclose(self) -> None: ...


def load_backend(name: str, settings: BrowserSettings) -> SearchBackend:
    backend: SearchBackend = registry.load(BACKENDS, name, "search backend")(settings)
    return backend
