"""What clients and the model are told of the fleet's insides: roles, never addresses.

Worker and tool-server failures carry their URLs (and the HTTP client's text, which often names one too).
Those go to the logs as they are; the texts a client or the model reads name the part by its role
(`worker 2`, `the tool server`) instead, so the fleet's topology reaches only its operators.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>()\[\]]+")
HIDDEN = "(an internal address)"


def hide(text: str, roles: Mapping[str, str] | None = None) -> str:
    """`text` with each URL in `roles` replaced by its role (a `worker URL` by `worker N`, not `worker worker
    N`) and any other URL by `HIDDEN`."""
    for url, role in (roles or {}).items():
        text = text.replace(f"worker {url}", role).replace(url, role)
    return URL.sub(HIDDEN, text)


def worker_roles(urls: list[str]) -> dict[str, str]:
    """Each worker URL's role: its place in `--worker-urls` (`worker 1`, ...), the URL as the pool writes it."""
    return {url.rstrip("/"): f"worker {n}" for n, url in enumerate(urls, 1)}
