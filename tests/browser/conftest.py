"""The browser's test stack: the fixture web on 127.0.0.1, a small corpus, and the real server as a subprocess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.web import browser_args, web_app, write_corpus
from tests.support.asgi import serve_asgi
from tests.support.service import Service, running_service


@pytest.fixture(scope="session")
def web() -> Iterator[str]:
    with serve_asgi(web_app()) as url:
        yield url


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def browser(web: str, corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(browser_args(web, corpus_dir, tmp_path_factory.mktemp("index"))) as svc:
        yield svc
