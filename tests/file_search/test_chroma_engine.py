"""The `chroma` vector engine against a real Chroma server (`chroma run` from PyPI's chromadb, its own venv): the
file_search server's MCP search over chroma-backed stores finds what the `exact` engine finds, a delete is out
of search at once, filters hold, and a Chroma that is down fails the calls that need it, clearly, while the
tool goes on serving and finds everything again once Chroma is back."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.file_search.test_server import ALICE, FACTS, call, error, index
from tests.support.chroma import Chroma
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service
from tools.file_search.settings import FileSearchSettings
from tools.file_search.vectors import load_engine
from tools.file_search.vectors.chroma import collection_name

QUERIES = ["why does sourdough rise?", "animals that sleep holding hands", "a lake of lava in Antarctica"]
STORE = "vs_chroma"


@pytest.fixture(scope="module")
def chroma(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chroma]:
    server = Chroma(tmp_path_factory.mktemp("chroma"))
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.path, ignore_errors=True)


@pytest.fixture(scope="module")
def chroma_data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    data = tmp_path_factory.mktemp("file-search-chroma")
    yield data
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def chroma_search(model_dir: Path, chroma_data: Path, chroma: Chroma) -> Iterator[Service]:
    engine = ["--vector-engine", "chroma", "--chroma-url", chroma.url, "--chroma-timeout-s", "5"]
    args = ["-m", "tools.file_search", "--data-dir", str(chroma_data), "--model-dir", str(model_dir), "--drain-s", "0"]
    with running_service([*args, *engine]) as svc:
        yield svc


def records(chroma: Chroma, owner_store: str) -> int:
    """How many records Chroma holds for a store (`<owner dir>/<store id>`), asked of the server itself."""
    base = f"{chroma.url}/api/v2/tenants/default_tenant/databases/default_database/collections"
    found = httpx.get(f"{base}?limit=1000").json()
    ids = [c["id"] for c in found if c["name"] == collection_name(Path(owner_store))]
    return httpx.get(f"{base}/{ids[0]}/count").json() if ids else 0


async def indexed_everywhere(*servers: Service) -> None:
    for server in servers:
        async with mcp_session(server.url, "streamable-http", ALICE) as s:
            for i, (name, text) in enumerate(FACTS.items()):
                await index(s, STORE, f"file-{i}", name, text, attributes={"n": i, "kind": name.split(".")[1]})


async def found(server: Service, query: str, **options: Any) -> list[tuple[str, float]]:
    async with mcp_session(server.url, "streamable-http", ALICE) as s:
        _, data = await call(s, "search", vector_store_ids=[STORE], query=query, **options)
    return [(r["file_id"], r["score"]) for r in data["results"]]


async def test_chroma_finds_what_exact_finds_filters_hold_and_a_delete_is_out_at_once(
    file_search: Service, chroma_search: Service, chroma: Chroma, data_dir: Path
) -> None:
    await indexed_everywhere(file_search, chroma_search)
    owner_dirs = [p for p in (data_dir / "stores").iterdir() if (p / STORE).exists()]
    assert records(chroma, f"{owner_dirs[0].name}/{STORE}") == 3  # one chunk per file, in Chroma itself
    vectors_only = {"ranking_options": {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}}
    for query in QUERIES:
        assert await found(chroma_search, query) == await found(file_search, query)
        assert await found(chroma_search, query, **vectors_only) == await found(file_search, query, **vectors_only)
    where = {
        "type": "or",
        "filters": [{"type": "eq", "key": "kind", "value": "txt"}, {"type": "gte", "key": "n", "value": 2}],
    }
    filtered = await found(chroma_search, "animals sleeping", filters=where, **vectors_only)
    assert {f for f, _ in filtered} == {"file-1", "file-2"}
    assert filtered == await found(file_search, "animals sleeping", filters=where, **vectors_only)

    async with mcp_session(chroma_search.url, "streamable-http", ALICE) as s:
        await call(s, "delete_file", vector_store_id=STORE, file_id="file-2")
    assert "file-2" not in {f for f, _ in await found(chroma_search, "sourdough wild yeast", **vectors_only)}
    assert records(chroma, f"{owner_dirs[0].name}/{STORE}") == 2


async def test_chroma_down_fails_the_calls_that_need_it_and_the_tool_keeps_serving(
    chroma_search: Service, chroma: Chroma, chroma_data: Path
) -> None:
    async with mcp_session(chroma_search.url, "streamable-http", ALICE) as s:
        await index(s, "vs_down", "file-v", "volcano.txt", FACTS["volcano.txt"])
        before = await found_in(s, "vs_down", "lava lake")
        chroma.stop()
        try:
            assert "the chroma server at" in await error(s, "search", vector_store_ids=["vs_down"], query="lava lake")
            refused = await error(
                s, "index_file", vector_store_id="vs_down", file_id="file-o", filename="o.md", content_base64="b3R0ZXI="
            )
            assert "file_search unavailable" in refused and "chroma" in refused
            kept_texts = {p.name async for p in anyio.Path(chroma_data).glob("stores/*/vs_down/parsed/*")}
            assert kept_texts == {"file-v.txt"}  # the refused file's parsed text is not left behind
            _, kept = await call(s, "file_content", vector_store_id="vs_down", file_id="file-v")  # still serving
            assert "Erebus" in kept["text"]
        finally:
            chroma.start()
        assert await found_in(s, "vs_down", "lava lake") == before
        assert "file-o" not in {f for f, _ in await found_in(s, "vs_down", "otter")}  # nothing half indexed
        await call(s, "delete_store", vector_store_id="vs_down")


async def found_in(s: Any, store: str, query: str) -> list[tuple[str, float]]:
    _, data = await call(s, "search", vector_store_ids=[store], query=query)
    return [(r["file_id"], r["score"]) for r in data["results"]]


def test_an_unknown_engine_or_chroma_without_a_url_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="unknown vector engine 'faiss'; choose one of exact, chroma"):
        load_engine(FileSearchSettings(vector_engine="faiss"))
    with pytest.raises(ValueError, match="--chroma-url"):
        load_engine(FileSearchSettings(vector_engine="chroma"))
