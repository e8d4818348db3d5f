"""The rest of `/v1/vector_stores` and its bad input, through the real `openai` SDK against an orchestrator (in
process) whose file_search calls go through a real gateway to the real file_search server: attributes updated
in place, a file's parsed content, file batches (create, list by status, pages, cancel, too many files), expiry
and its reaper, the per-key bytes bound and the file size bound, each bad file failed alone with its reason."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
from openai.types import VectorStore
from openai.types.vector_stores import FileContentResponse, VectorStoreFile, VectorStoreFileBatch

from orchestrator.app import create_app
from orchestrator.errors import RequestError
from orchestrator.files import FileRecord as Upload
from orchestrator.files import Files
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import ToolOutcome
from orchestrator.vector_stores import (
    AddFile,
    CreateBatch,
    CreateStore,
    FileBatches,
    Search,
    UpdateStore,
    VectorStores,
)
from orchestrator.vector_stores.ingest import IndexTool, Ingestion, Limits
from orchestrator.vector_stores.records import MAX_STORE_FILES
from tests.support.asgi import serve_asgi
from tests.support.gateway import gateway_config, running_gateway
from tests.support.service import Service

MAX_FILE_BYTES = 4096
"""--max-vector-store-file-bytes here (default 16 MiB): a 'very large' file is one past it."""
MAX_KEY_BYTES = 9_000
"""--max-vector-store-bytes-per-key here (default 1 GiB)."""


@dataclass(frozen=True)
class Fleet:
    url: str
    tool_url: str
    data_dir: Path


@pytest.fixture(scope="module")
def fleet(file_search: Service, data_dir: Path) -> Iterator[Fleet]:
    cfg = gateway_config({"file_search": [f"{file_search.url}/mcp"]})
    with running_gateway(cfg) as gateway, tempfile.TemporaryDirectory(prefix="toolfleet-test-") as scratch:
        settings = OrchestratorSettings(
            worker_urls=["http://127.0.0.1:9"],  # no model is asked: the vector store routes alone
            tools_url=gateway.base,
            api_keys=["key-a", "key-b", "key-c"],
            store_path=f"{scratch}/store.sqlite3",
            files_dir=f"{scratch}/files",
            max_vector_store_file_bytes=MAX_FILE_BYTES,
            max_vector_store_bytes_per_key=MAX_KEY_BYTES,
        )
        with serve_asgi(create_app(settings, stores=SQLiteStores())) as url:
            yield Fleet(url, gateway.url("file_search"), data_dir)


def client(fleet: Fleet, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{fleet.url}/v1", api_key=key, max_retries=0, timeout=120)


def strict(model: type, data: dict[str, Any]) -> None:
    model.model_validate(data)
    assert set(data) <= set(model.model_fields), set(data) - set(model.model_fields)


def raw(fleet: Fleet, key: str = "key-a") -> httpx.Client:
    return httpx.Client(base_url=f"{fleet.url}/v1", headers={"authorization": f"Bearer {key}"}, timeout=60)


def upload(sdk: openai.OpenAI, name: str, data: bytes) -> str:
    return sdk.files.create(file=(name, data), purpose="assistants").id


def test_attributes_are_updated_in_place_and_content_is_the_parsed_text(fleet: Fleet) -> None:
    sdk = client(fleet)
    fid = upload(sdk, "owls.html", b"<p>Barn owls swallow their prey whole and cough up pellets.</p>")
    store = sdk.vector_stores.create(name="owls", expires_after={"anchor": "last_active_at", "days": 2})
    strict(VectorStore, raw(fleet).get(f"/vector_stores/{store.id}").json())
    assert store.expires_at == store.last_active_at + 2 * 86400 and store.status == "completed"
    sdk.vector_stores.files.create(store.id, file_id=fid, attributes={"topic": "birds"})
    assert sdk.vector_stores.files.poll(fid, vector_store_id=store.id, poll_interval_ms=200).status == "completed"

    updated = sdk.vector_stores.files.update(fid, vector_store_id=store.id, attributes={"topic": "raptors", "n": 3})
    assert updated.attributes == {"topic": "raptors", "n": 3}
    for topic, found in (("raptors", [fid]), ("birds", [])):
        where: Any = {"type": "eq", "key": "topic", "value": topic}
        assert [h.file_id for h in sdk.vector_stores.search(store.id, query="owl pellets", filters=where)] == found
    missing: Any = {"type": "eq", "key": "colour", "value": "brown"}
    assert list(sdk.vector_stores.search(store.id, query="owl pellets", filters=missing)) == []

    body = raw(fleet).get(f"/vector_stores/{store.id}/files/{fid}/content").json()
    assert body["object"] == "vector_store.file_content.page" and body["has_more"] is False
    for part in body["data"]:
        strict(FileContentResponse, part)
    parts = list(sdk.vector_stores.files.content(fid, vector_store_id=store.id))
    assert [p.text for p in parts] == ["Barn owls swallow their prey whole and cough up pellets."]

    for bad in ({f"k{i}": i for i in range(17)}, {"k" * 65: 1}, {"k": "v" * 513}, {"k": [1]}):
        with pytest.raises(openai.BadRequestError):
            sdk.vector_stores.files.update(fid, vector_store_id=store.id, attributes=bad)  # type: ignore[arg-type]
    assert sdk.vector_stores.files.retrieve(fid, vector_store_id=store.id).attributes == updated.attributes
    assert sdk.vector_stores.delete(store.id).deleted


def test_a_batch_indexes_good_files_fails_bad_ones_alone_and_lists_them_by_status(fleet: Fleet) -> None:
    sdk = client(fleet)
    good = [
        upload(sdk, f"fact{i}.txt", f"Fact {i}: the number {i} is written as {'I' * i}.".encode()) for i in (1, 2, 3)
    ]
    bad = {
        upload(sdk, "corrupt.pdf", b"%PDF-1.4 this is no PDF at all"): "invalid_file",
        upload(sdk, "empty.txt", b""): "invalid_file",
        upload(sdk, "program.exe", b"MZ\x90\x00"): "unsupported_file",
        upload(sdk, "huge.txt", b"x " * MAX_FILE_BYTES): "invalid_file",
    }
    store = sdk.vector_stores.create(name="batch")
    files: Any = [{"file_id": f, "attributes": {"i": i}} for i, f in enumerate(good)] + [{"file_id": f} for f in bad]
    batch = sdk.vector_stores.file_batches.create(store.id, files=files)
    strict(VectorStoreFileBatch, raw(fleet).get(f"/vector_stores/{store.id}/file_batches/{batch.id}").json())
    done = sdk.vector_stores.file_batches.poll(batch.id, vector_store_id=store.id, poll_interval_ms=200)
    assert (done.status, done.file_counts.completed, done.file_counts.failed, done.file_counts.total) == (
        "completed",
        3,
        4,
        7,
    )
    failed = list(sdk.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id, filter="failed"))
    assert {f.id: f.last_error.code for f in failed if f.last_error} == bad
    huge = next(f for f in failed if f.last_error and "max-vector-store-file-bytes" in f.last_error.message)
    assert huge.usage_bytes == 0
    first = sdk.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id, limit=2, order="asc")
    assert first.has_more and len(first.data) == 2
    rest = sdk.vector_stores.files.list(store.id, after=first.data[-1].id, order="asc", limit=100)
    back = sdk.vector_stores.files.list(store.id, before=rest.data[0].id, order="asc", limit=100)
    assert [f.id for f in back.data] == [f.id for f in first.data] and len(rest.data) == 5
    for entry in raw(fleet).get(f"/vector_stores/{store.id}/file_batches/{batch.id}/files").json()["data"]:
        strict(VectorStoreFile, entry)

    again = sdk.vector_stores.file_batches.create_and_poll(store.id, file_ids=good, poll_interval_ms=200)
    assert again.file_counts.completed == 3
    hits = list(sdk.vector_stores.search(store.id, query="the number written as", max_num_results=10))
    assert sorted(h.file_id for h in hits) == sorted(good)  # added twice, indexed once each
    assert sdk.vector_stores.retrieve(store.id).file_counts.total == 7
    assert sdk.vector_stores.delete(store.id).deleted


def test_too_many_files_or_a_malformed_batch_is_refused_and_adds_nothing(fleet: Fleet) -> None:
    sdk = client(fleet)
    fid = upload(sdk, "one.txt", b"One file.")
    store = sdk.vector_stores.create(name="refused")
    cases: list[dict[str, Any]] = [
        {"file_ids": [f"file-{i}" for i in range(10_000)]},
        {"file_ids": [fid], "files": [{"file_id": fid}]},
        {"file_ids": [fid, fid]},
        {"file_ids": []},
        {"files": [{"file_id": fid}], "attributes": {"a": 1}},
    ]
    for case in cases:
        reply = raw(fleet).post(f"/vector_stores/{store.id}/file_batches", json=case)
        assert reply.status_code == 400, reply.text
    assert "2000" in raw(fleet).post(f"/vector_stores/{store.id}/file_batches", json=cases[0]).text
    with pytest.raises(openai.NotFoundError, match="file-missing"):
        sdk.vector_stores.file_batches.create(store.id, file_ids=[fid, "file-missing"])
    assert sdk.vector_stores.retrieve(store.id).file_counts.total == 0
    assert sdk.vector_stores.delete(store.id).deleted


def test_another_keys_store_file_and_batch_are_the_same_404_as_unknown_ones(fleet: Fleet) -> None:
    sdk, other = client(fleet), client(fleet, "key-b")
    fid = upload(sdk, "mine.txt", b"Private notes about the garden.")
    store = sdk.vector_stores.create(name="mine")
    batch = sdk.vector_stores.file_batches.create_and_poll(store.id, file_ids=[fid], poll_interval_ms=200)
    for store_id in (store.id, "vs_unknown"):
        calls: list[Callable[[str], object]] = [
            lambda vs: other.vector_stores.file_batches.retrieve(batch.id, vector_store_id=vs),
            lambda vs: other.vector_stores.file_batches.cancel(batch.id, vector_store_id=vs),
            lambda vs: other.vector_stores.file_batches.create(vs, file_ids=[fid]),
            lambda vs: other.vector_stores.files.update(fid, vector_store_id=vs, attributes={"a": "b"}),
            lambda vs: other.vector_stores.files.content(fid, vector_store_id=vs),
        ]
        for call in calls:
            with pytest.raises(openai.NotFoundError):
                call(store_id)
    with pytest.raises(openai.NotFoundError):
        sdk.vector_stores.file_batches.retrieve("vsfb_unknown", vector_store_id=store.id)
    assert sdk.vector_stores.delete(store.id).deleted


def test_a_file_past_the_keys_bytes_fails_whole_and_the_key_keeps_working(fleet: Fleet) -> None:
    sdk = client(fleet, "key-c")
    words = " ".join(f"word{i}" for i in range(250)).encode()  # 100-token chunks: about 7, 1536 vector bytes each
    big, small = upload(sdk, "big.txt", words), upload(sdk, "small.txt", b"A small kept fact.")
    store = sdk.vector_stores.create(name="budget")
    chunking: Any = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}}
    sdk.vector_stores.files.create(store.id, file_id=big, chunking_strategy=chunking)
    failed = sdk.vector_stores.files.poll(big, vector_store_id=store.id, poll_interval_ms=200)
    assert failed.status == "failed" and failed.last_error is not None
    assert "--max-vector-store-bytes-per-key" in failed.last_error.message and failed.usage_bytes == 0
    assert list(sdk.vector_stores.search(store.id, query="word42")) == []  # nothing of it indexed
    sdk.vector_stores.files.create(store.id, file_id=small)
    assert sdk.vector_stores.files.poll(small, vector_store_id=store.id, poll_interval_ms=200).status == "completed"
    assert 0 < sdk.vector_stores.retrieve(store.id).usage_bytes <= MAX_KEY_BYTES
    assert sdk.vector_stores.delete(store.id).deleted


@pytest.fixture
async def direct(fleet: Fleet, tmp_path: Path) -> Any:
    """A `VectorStores` of its own (one file at a time) over the fleet's tool, for what the API cannot reach on
    cue: a batch cancelled while all of it waits, a store whose expiry has passed."""
    stores = SQLiteStores()
    files = Files(stores.objects, tmp_path, max_bytes=1 << 20, retention_s=3600)
    vector_stores = VectorStores(files, fleet.tool_url)
    try:
        yield vector_stores
    finally:
        await vector_stores.aclose()
        await stores.aclose()


async def put_upload(files: Files, owner: str, name: str, data: bytes) -> str:
    file_id = f"file-{name.replace('.', '-')}-{time.time_ns()}"
    await anyio.Path(files.path(file_id)).write_bytes(data)
    now = int(time.time())
    await files.objects.put("file", asdict(Upload(file_id, owner, name, "assistants", len(data), now, now + 3600)))
    return file_id


async def test_a_cancelled_batch_indexes_nothing_it_had_not_finished(direct: VectorStores) -> None:
    owner = "test-direct-cancel"
    store = await direct.create(CreateStore(), owner)
    ids = [await put_upload(direct.files, owner, f"n{i}.txt", f"Note {i} about comets.".encode()) for i in range(5)]
    batches = FileBatches(direct)
    limiter = direct.ingestion.limiter
    await limiter.acquire_on_behalf_of("test")  # every file of the batch waits its turn
    try:
        batch = await batches.create(store.id, owner, CreateBatch(files=[AddFile(file_id=f) for f in ids]))
        assert len(direct.ingestion.tasks) == 1  # the whole batch is one task, not one per file
        cancelled = await batches.cancel(store.id, owner=owner, batch_id=batch["id"])
    finally:
        limiter.release_on_behalf_of("test")
    await asyncio.gather(*direct.ingestion.tasks)
    assert cancelled["status"] == "cancelled" and cancelled["file_counts"]["cancelled"] == 5
    assert (await batches.body(await batches.find(store.id, batch["id"], owner)))["file_counts"]["cancelled"] == 5
    assert (await direct.search(store.id, owner, Search(query="comets")))["data"] == []
    await direct.delete(store.id, owner)


async def test_a_file_cancelled_while_it_was_indexed_is_removed_from_the_index_again(direct: VectorStores) -> None:
    """The cancel lands between the tool's `index_file` and the record's update (as when another replica runs
    it): the settled file stays `cancelled` and nothing of it is found."""
    owner = "test-direct-inflight"
    store = await direct.create(CreateStore(), owner)
    fid = await put_upload(direct.files, owner, "geyser.txt", b"Old Faithful erupts about every ninety minutes.")
    record = direct.new_record(store.id, fid, AddFile(file_id=fid))
    await direct.objects.put("vector_store_file", asdict(record))
    outcome = await direct.ingestion._index(owner, record, "geyser.txt")
    assert not outcome.is_error and (await direct.search(store.id, owner, Search(query="geyser")))["data"]
    await direct.objects.put("vector_store_file", asdict(record) | {"status": "cancelled"})
    await direct.ingestion._settle(owner, record, outcome)
    assert (await direct.find_file(store.id, fid, owner)).status == "cancelled"
    assert (await direct.search(store.id, owner, Search(query="Old Faithful geyser")))["data"] == []
    await direct.delete(store.id, owner)


async def test_an_expired_store_is_reaped_and_answers_expired(direct: VectorStores, fleet: Fleet) -> None:
    owner = "test-direct-expiry"
    spec = CreateStore.model_validate({"name": "old", "expires_after": {"anchor": "last_active_at", "days": 1}})
    store = await direct.create(spec, owner)
    fid = await put_upload(direct.files, owner, "tide.txt", b"The tide turns twice a day.")
    await direct.add_file(store.id, owner, AddFile(file_id=fid))
    await asyncio.gather(*direct.ingestion.tasks)
    assert (await direct.find_file(store.id, fid, owner)).status == "completed"
    index = next(fleet.data_dir.glob(f"stores/*/{store.id}"))

    store.last_active_at -= 2 * 86400  # its day has passed: the reaper's claim is due
    await direct.objects.put("vector_store", asdict(store))
    await direct.objects.put("vector_store_expiry", {"id": store.id, "owner": owner, "expires_at": 0})
    await direct.prune()
    assert not index.exists()
    body = await direct.body(await direct.find(store.id, owner))
    assert body["status"] == "expired" and body["file_counts"]["total"] == 0
    strict(VectorStore, body)
    with pytest.raises(RequestError, match="has expired"):
        await direct.search(store.id, owner, Search(query="tide"))
    with pytest.raises(RequestError, match="has expired"):
        await direct.add_file(store.id, owner, AddFile(file_id=fid))
    with pytest.raises(RequestError, match="has expired"):
        await direct.update(store.id, owner, UpdateStore(name="revived"))
    await direct.delete(store.id, owner)


async def test_a_keys_stores_and_a_stores_files_are_bounded(fleet: Fleet, tmp_path: Path) -> None:
    """Neither was: one key could make stores, and one store file records, without end (every listing, and the
    bytes check before each file is indexed, read them all)."""
    stores = SQLiteStores()
    files = Files(stores.objects, tmp_path, max_bytes=1 << 20, retention_s=3600)
    direct = VectorStores(files, fleet.tool_url, Limits(max_stores_per_key=3))
    owner = "test-direct-bounds"
    try:
        made = [await direct.create(CreateStore(), owner) for _ in range(3)]
        with pytest.raises(RequestError, match="--max-vector-stores-per-key"):
            await direct.create(CreateStore(), owner)
        assert await direct.create(CreateStore(), "test-direct-other")  # another key's bound is its own
        await direct.delete(made.pop().id, owner)
        store = await direct.create(CreateStore(), owner)

        held = await put_upload(files, owner, "held.txt", b"A file the store holds already.")
        filler = [f"file-{n}" for n in range(MAX_STORE_FILES - 1)]  # the store full, as 10,000 adds would leave it
        for file_id in [*filler, held]:
            record = direct.new_record(store.id, file_id, AddFile(file_id=file_id))
            await files.objects.put("vector_store_file", asdict(record))
        one_more = await put_upload(files, owner, "more.txt", b"One file too many.")
        with pytest.raises(RequestError, match="at most 10000") as refused:
            await direct.add_file(store.id, owner, AddFile(file_id=one_more))
        assert refused.value.param == "file_id"
        with pytest.raises(RequestError, match="at most 10000"):
            await FileBatches(direct).create(store.id, owner, CreateBatch(file_ids=[held, one_more]))
        assert (await direct.add_file(store.id, owner, AddFile(file_id=held))).file_id == held  # added again
        await asyncio.gather(*direct.ingestion.tasks)
        await direct.delete(store.id, owner)
    finally:
        await direct.aclose()
        await stores.aclose()


def _waiting(ingestion: Ingestion) -> int:
    """The files waiting for the replica's indexing slot, or for their key's turn at it."""
    limiters = [ingestion.limiter, *getattr(ingestion, "keys", {}).values()]
    return sum(limiter.statistics().tasks_waiting for limiter in limiters)


async def test_keys_take_turns_at_indexing_however_many_adds_one_has_queued(tmp_path: Path) -> None:
    """The replica's indexing slots were one queue of every add's workers: a key with ten adds in flight had ten
    places in it, and another key's one file waited for all ten."""
    stores = SQLiteStores()
    files = Files(stores.objects, tmp_path, max_bytes=1 << 20, retention_s=3600)
    ingestion = Ingestion(files, IndexTool("http://127.0.0.1:9", 10), Limits(concurrency=1))
    order: list[str] = []

    async def index(owner: str, record: Any, filename: str) -> ToolOutcome:  # what the tool is not asked here
        order.append(owner)
        return ToolOutcome("indexed", False, structured={"usage_bytes": 1})

    ingestion._index = index  # type: ignore[method-assign]
    vector_stores = VectorStores(files, "http://127.0.0.1:9")
    try:
        await ingestion.limiter.acquire_on_behalf_of("test")  # everything queues, then starts in turn
        for owner, adds in (("busy", 10), ("quiet", 1)):
            for n in range(adds):
                record = vector_stores.new_record(f"vs_{owner}", f"file-{n}", AddFile(file_id=f"file-{n}"))
                await stores.objects.put("vector_store_file", asdict(record))
                ingestion.start(owner, [(record, f"{n}.txt")])
        with anyio.fail_after(10):
            while _waiting(ingestion) < 11:  # every add's worker has taken its place in the queues
                await anyio.wait_all_tasks_blocked()
        ingestion.limiter.release_on_behalf_of("test")
        await asyncio.gather(*ingestion.tasks)
        assert len(order) == 11 and order.index("quiet") <= 2, order
    finally:
        await vector_stores.aclose()
        await stores.aclose()
