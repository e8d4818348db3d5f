"""Ingestion: a file's bytes (from `/v1/files`) sent to the file_search tool's `index_file`, in the background.

Each add (one file, a store's `file_ids`, a batch of up to 2000) is one task whose few workers take its files in
turn, and every replica indexes at most `concurrency` files at once (a capacity limiter shared by all adds), so a
large batch never becomes thousands of tasks; each key queues for it with at most `concurrency` files, so keys take
turns however many adds one of them has in flight. Before a file starts, its record is read again: one cancelled or
deleted meanwhile is skipped. A file that finishes after its record was cancelled is removed from the index again,
so a cancelled file never stays searchable. Each file is offered the bytes its key has left (`max_usage_bytes`),
and the tool refuses one that would pass them before adding anything; files indexed at the same moment are each
checked against what was completed before them, so together they can pass the bound by what they hold.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import anyio
import structlog

from orchestrator.errors import RequestError
from orchestrator.files import Files
from orchestrator.persist import Objects
from orchestrator.tools import ToolOutcome, ToolSessions
from orchestrator.vector_stores.records import FileRecord, failure

log = structlog.get_logger(__name__)


class IndexTool:
    """Calls of the file_search tool server for a key (one tool session per key, which holds nothing)."""

    def __init__(self, url: str | None, timeout_s: float) -> None:
        self.url, self.timeout_s = url, timeout_s

    async def call(self, owner: str, name: str, args: dict[str, Any]) -> ToolOutcome:
        sessions = ToolSessions(session_id=f"vector-stores-{owner}", timeout_s=self.timeout_s, owner=owner)
        return await sessions.call_once(self.reachable(), name, args)

    async def must(self, owner: str, name: str, args: dict[str, Any], what: str) -> ToolOutcome:
        """A call whose failure fails the request: the tool's words, a 400 for the caller's fault, else 502."""
        outcome = await self.call(owner, name, args)
        if outcome.kind == "tool_error":
            raise RequestError(outcome.text, None)
        if outcome.is_error:
            raise RequestError(f"the file_search tool could not {what}: {outcome.text}", None, 502)
        return outcome

    def reachable(self) -> str:
        """The tool's URL; none configured: the vector store routes answer 501."""
        if self.url is None:
            raise RequestError("vector stores need the file_search tool: this server has no --tools-url", None, 501)
        return self.url


@dataclass(frozen=True)
class Limits:
    """How much one replica indexes at once, and the bounds on a file and on a key's stores."""

    concurrency: int = 2
    max_file_bytes: int = 16 * 1024 * 1024
    max_bytes_per_key: int = 1 << 30
    max_stores_per_key: int = 10_000


async def used_bytes(objects: Objects, owner: str, but: str | None = None) -> int:
    """What the key's completed files hold in all its stores (less the file `but`, about to be replaced): its
    quota's count, and the console's stored bytes."""
    total = 0
    for store in await objects.owned("vector_store", owner):
        files = await objects.owned("vector_store_file", store["id"])
        total += sum(f["usage_bytes"] for f in files if f["status"] == "completed" and f["id"] != but)
    return total


class Ingestion:
    """The background indexing of one replica: its tasks, the records it has queued or is indexing."""

    def __init__(self, files: Files, tool: IndexTool, limits: Limits) -> None:
        self.files, self.objects, self.tool = files, files.objects, tool
        self.concurrency, self.max_bytes_per_key = limits.concurrency, limits.max_bytes_per_key
        self.max_file_bytes = limits.max_file_bytes
        self.limiter = anyio.CapacityLimiter(limits.concurrency)
        self.keys: dict[str, anyio.CapacityLimiter] = {}
        """Each key's own turn at the shared limiter: its adds queue here, so a key with a thousand adds in flight
        holds as many places in the shared queue as a key with one (it held a thousand: the other waited for all)."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.pending: set[str] = set()
        """File records this replica has queued or is indexing."""

    def start(self, owner: str, files: list[tuple[FileRecord, str]]) -> None:
        """Index `files` (each record with its filename) in the background, a few at a time."""
        self.pending.update(record.id for record, _ in files)
        task = asyncio.create_task(self._all(owner, iter(files), min(self.concurrency, len(files))))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _all(self, owner: str, queue: Iterator[tuple[FileRecord, str]], workers: int) -> None:
        async def worker() -> None:
            for record, filename in queue:  # one iterator: each worker takes the next file
                try:
                    await self._one(owner, record, filename)
                finally:
                    self.pending.discard(record.id)

        async with anyio.create_task_group() as group:
            for _ in range(workers):
                group.start_soon(worker)

    async def _one(self, owner: str, record: FileRecord, filename: str) -> None:
        mine = self.keys.setdefault(owner, anyio.CapacityLimiter(self.concurrency))
        async with mine, self.limiter:  # a key waits on the shared limiter with as many files as it may index
            current = await self.objects.get("vector_store_file", record.id)
            if current is None or current["status"] != "in_progress":
                return  # deleted or cancelled while queued
            outcome = await self._index(owner, record, filename)
        await self._settle(owner, record, outcome)

    async def _index(self, owner: str, record: FileRecord, filename: str) -> ToolOutcome:
        path = anyio.Path(self.files.path(record.file_id))
        try:
            size = (await path.stat()).st_size
            if size > self.max_file_bytes:  # refused before its bytes are read into memory
                message = f"the file has {size} bytes; vector stores take files of at most {self.max_file_bytes}"
                return ToolOutcome(message + " (--max-vector-store-file-bytes)", True, outcome="tool_error")
            data = await path.read_bytes()
        except OSError as exc:
            return ToolOutcome(f"the file's bytes could not be read: {exc}", True)
        args = {
            "vector_store_id": record.owner,
            "file_id": record.file_id,
            "filename": filename,
            "content_base64": base64.b64encode(data).decode(),
            "attributes": record.attributes,
            "chunking_strategy": record.chunking if record.chunking.get("type") == "static" else None,
            "max_usage_bytes": self.max_bytes_per_key - await self.used_bytes(owner, record.id),
        }
        return await self.tool.call(owner, "index_file", args)

    async def used_bytes(self, owner: str, but: str | None = None) -> int:
        return await used_bytes(self.objects, owner, but)

    async def _settle(self, owner: str, record: FileRecord, outcome: ToolOutcome) -> None:
        current = await self.objects.get("vector_store_file", record.id)
        if current is None or current["status"] == "cancelled":
            if not outcome.is_error and current is not None:  # cancelled while indexed: what it added goes
                await self.tool.call(owner, "delete_file", {"vector_store_id": record.owner, "file_id": record.file_id})
            return  # deleted while indexed: the delete removed it from the index too
        sent, record.attributes = record.attributes, current["attributes"]
        if outcome.is_error:
            record.status, record.last_error = "failed", failure(outcome)
        else:
            record.status, record.usage_bytes = "completed", int((outcome.structured or {}).get("usage_bytes", 0))
            if sent != record.attributes:  # updated while the file was indexed: the index gets them now
                args = {"vector_store_id": record.owner, "file_id": record.file_id, "attributes": record.attributes}
                await self.tool.call(owner, "set_attributes", args)
        await self.objects.put("vector_store_file", asdict(record))
        log.info(
            "vector_store.file_indexed", vector_store_id=record.owner, file_id=record.file_id, status=record.status
        )

    async def aclose(self) -> None:
        """Stop the ingestion in flight (its files stay `in_progress`: added again, they are indexed anew)."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
