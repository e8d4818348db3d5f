"""`/v1/vector_stores` through the real `openai` SDK: an orchestrator (in process) whose file_search calls go
through a real gateway to the real file_search server (a subprocess with the real model). Bodies validate
strictly against the SDK's types; another key's store is a 404; a file that cannot be parsed fails alone."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types import VectorStore, VectorStoreSearchResponse
from openai.types.vector_stores import VectorStoreFile

from orchestrator.app import create_app
from orchestrator.files import Files
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.vector_stores import STALE_MARGIN_S, FileRecord, StoreRecord, VectorStores
from tests.support.asgi import serve_asgi
from tests.support.gateway import gateway_config, running_gateway
from tests.support.service import Service

FILES = {
    "otters.md": b"Sea otters hold hands while they sleep so that they do not drift apart.",
    "volcano.txt": b"Mount Erebus in Antarctica has a persistent lava lake at its summit crater.",
    "bread.html": b"<html><body><p>Sourdough rises because wild yeast ferments the dough.</p></body></html>",
}


@pytest.fixture(scope="module")
def orchestrator(file_search: Service) -> Iterator[str]:
    cfg = gateway_config({"file_search": [f"{file_search.url}/mcp"]})
    with running_gateway(cfg) as gateway, tempfile.TemporaryDirectory(prefix="toolfleet-test-") as scratch:
        settings = OrchestratorSettings(
            worker_urls=["http://127.0.0.1:9"],  # no model is asked: the vector store routes alone
            tools_url=gateway.base,
            api_keys=["key-a", "key-b"],
            store_path=f"{scratch}/store.sqlite3",
            files_dir=f"{scratch}/files",
        )
        with serve_asgi(create_app(settings, stores=SQLiteStores())) as url:
            yield url


def client(url: str, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def strict(model: type, data: dict[str, Any]) -> None:
    model.model_validate(data)
    assert set(data) <= set(model.model_fields), set(data) - set(model.model_fields)


def settled(sdk: openai.OpenAI, store_id: str, file_id: str) -> VectorStoreFile:
    """The file once its background indexing ended: the SDK's own poll (it waits on the status it reads)."""
    return sdk.vector_stores.files.poll(file_id, vector_store_id=store_id, poll_interval_ms=200)


def test_create_index_search_and_delete_with_the_sdk(orchestrator: str) -> None:
    sdk = client(orchestrator)
    uploads = {name: sdk.files.create(file=(name, data), purpose="assistants") for name, data in FILES.items()}
    store = sdk.vector_stores.create(name="facts", file_ids=[u.id for u in uploads.values()], metadata={"k": "v"})
    assert store.status in ("in_progress", "completed") and store.file_counts.total == 3
    for upload in uploads.values():
        assert settled(sdk, store.id, upload.id).status == "completed"
    done = sdk.vector_stores.retrieve(store.id)
    assert (done.status, done.file_counts.completed, done.name, done.metadata) == ("completed", 3, "facts", {"k": "v"})
    assert done.usage_bytes > 0

    hits = list(sdk.vector_stores.search(store.id, query="why does sourdough rise?", max_num_results=2))
    assert hits[0].file_id == uploads["bread.html"].id and hits[0].filename == "bread.html"
    assert "wild yeast" in hits[0].content[0].text and len(hits) == 2

    extra = sdk.files.create(file=("notes.md", b"Penguins huddle together for warmth."), purpose="assistants")
    added = sdk.vector_stores.files.create(store.id, file_id=extra.id, attributes={"topic": "birds", "year": 2024})
    assert settled(sdk, store.id, added.id).status == "completed"
    where: Any = {"type": "gte", "key": "year", "value": 2020}
    filtered = list(sdk.vector_stores.search(store.id, query="animals", filters=where))
    assert [h.file_id for h in filtered] == [extra.id] and filtered[0].attributes == {"topic": "birds", "year": 2024}

    sdk.vector_stores.files.delete(uploads["bread.html"].id, vector_store_id=store.id)
    again = list(sdk.vector_stores.search(store.id, query="sourdough wild yeast"))
    assert uploads["bread.html"].id not in {h.file_id for h in again}
    assert {f.id for f in sdk.vector_stores.files.list(store.id)} == {u.id for u in uploads.values()} - {
        uploads["bread.html"].id
    } | {extra.id}
    renamed = sdk.vector_stores.update(store.id, name="renamed")
    assert renamed.name == "renamed" and store.id in {s.id for s in sdk.vector_stores.list()}
    assert sdk.vector_stores.delete(store.id).deleted
    with pytest.raises(openai.NotFoundError):
        sdk.vector_stores.retrieve(store.id)


def test_bodies_validate_strictly_and_another_keys_store_is_missing(orchestrator: str) -> None:
    sdk, other = client(orchestrator), client(orchestrator, "key-b")
    upload = sdk.files.create(file=("a.txt", b"The lighthouse keeper's cat is named Biscuit."), purpose="assistants")
    store = sdk.vector_stores.create(name="typed", file_ids=[upload.id])
    settled(sdk, store.id, upload.id)
    raw = httpx.Client(base_url=f"{orchestrator}/v1", headers={"authorization": "Bearer key-a"}, timeout=60)
    strict(VectorStore, raw.get(f"/vector_stores/{store.id}").json())
    strict(VectorStoreFile, raw.get(f"/vector_stores/{store.id}/files/{upload.id}").json())
    for entry in raw.post(f"/vector_stores/{store.id}/search", json={"query": "cat name"}).json()["data"]:
        strict(VectorStoreSearchResponse, entry)
    calls: list[Callable[[], object]] = [
        lambda: other.vector_stores.retrieve(store.id),
        lambda: other.vector_stores.search(store.id, query="cat"),
        lambda: other.vector_stores.files.retrieve(upload.id, vector_store_id=store.id),
        lambda: other.vector_stores.delete(store.id),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError):
            call()
    assert sdk.vector_stores.delete(store.id).deleted


def test_a_file_that_cannot_be_parsed_fails_alone_with_its_reason(orchestrator: str) -> None:
    sdk = client(orchestrator)
    good = sdk.files.create(file=("good.txt", b"Quokkas live on Rottnest Island."), purpose="assistants")
    bad = sdk.files.create(file=("broken.pdf", b"%PDF-1.4 not really"), purpose="assistants")
    odd = sdk.files.create(file=("tool.exe", b"MZ\x90\x00"), purpose="assistants")
    store = sdk.vector_stores.create(name="mixed", file_ids=[good.id, bad.id, odd.id])
    assert settled(sdk, store.id, good.id).status == "completed"
    failed = settled(sdk, store.id, bad.id)
    assert failed.status == "failed" and failed.last_error is not None and failed.last_error.code == "invalid_file"
    assert "PDF could not be read" in failed.last_error.message
    unsupported = settled(sdk, store.id, odd.id)
    assert unsupported.last_error is not None and unsupported.last_error.code == "unsupported_file"
    counts = sdk.vector_stores.retrieve(store.id).file_counts
    assert (counts.completed, counts.failed, counts.total) == (1, 2, 3)
    with pytest.raises(openai.BadRequestError, match="one query is searched at a time"):
        sdk.vector_stores.search(store.id, query=["a", "b"])
    with pytest.raises(openai.NotFoundError):
        sdk.vector_stores.files.create("vs_missing", file_id=good.id)
    assert sdk.vector_stores.delete(store.id).deleted


async def test_a_file_whose_indexing_was_cut_off_by_a_stop_fails_and_its_store_settles(tmp_path: Path) -> None:
    """A record left `in_progress` by a replica that stopped (no replica queues it, and it is older than a call
    may last) reads as failed with its reason; one queued here stays in progress."""
    stores = SQLiteStores()
    try:
        vector_stores = VectorStores(Files(stores.objects, tmp_path, max_bytes=1024, retention_s=3600), None)
        now = int(time.time())
        await stores.objects.put("vector_store", asdict(StoreRecord("vs_x", "key", "s", now, now, None, now + 3600)))
        old = now - int(vector_stores.timeout_s) - STALE_MARGIN_S - 1
        for file_id in ("file-cut", "file-queued"):
            await stores.objects.put(
                "vector_store_file", asdict(FileRecord(f"vs_x/{file_id}", "vs_x", file_id, old, now + 3600))
            )
        vector_stores.ingestion.pending.add("vs_x/file-queued")
        cut = await vector_stores.find_file("vs_x", "file-cut", "key")
        assert cut.status == "failed" and cut.last_error is not None and "interrupted" in cut.last_error["message"]
        body = await vector_stores.body(await vector_stores.find("vs_x", "key"))
        assert body["file_counts"] | {"total": 0} == {
            "in_progress": 1,
            "completed": 0,
            "failed": 1,
            "cancelled": 0,
            "total": 0,
        }
    finally:
        await stores.aclose()
