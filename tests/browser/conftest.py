"""The browser's test stack: the fixture web on 127.0.0.1, a small corpus, and the real server as a subprocess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.web import web_app
from tests.support.asgi import serve_asgi
from tests.support.service import Service, running_service

CORPUS = {
    "guide/tea.html": "<html><head><title>Corpus tea guide</title></head><body><h1>Tea guide</h1>"
    "<p>Oolong tea is partly oxidised. Read <a href='../notes/kettle.md'>the kettle notes</a>.</p></body></html>",
    "notes/kettle.md": "# Kettle notes\n\nBoil water to 95 degrees for oolong.\n",
    "notes/plain.txt": "Plain text about samovars and water.\n",
    "ignored.bin": "not a document",
}


@pytest.fixture(scope="session")
def web() -> Iterator[str]:
    with serve_asgi(web_app()) as url:
        yield url


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for rel, text in CORPUS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def browser_args(web: str, corpus: Path, index: Path, *extra: str) -> list[str]:
    host = web.removeprefix("http://")
    return ["-m", "tools.browser", "--corpus-dir", str(corpus), "--index-dir", str(index), "--allow-hosts", host,
            "--fetch-timeout-s", "3", *extra]  # fmt: skip


@pytest.fixture(scope="module")
def browser(web: str, corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(browser_args(web, corpus_dir, tmp_path_factory.mktemp("index"))) as svc:
        yield svc
