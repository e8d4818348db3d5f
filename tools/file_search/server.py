"""The MCP shell around the engine: four tools the orchestrator calls for the caller's key (the signed owner
header), their arguments checked at the edge.

`search` answers the model-readable text (each result with its file, score and text) and the results as
structured data; `index_file` (refused before anything is added past `max_usage_bytes`), `set_attributes`
(filters see the new attributes at once; nothing is embedded again), `file_content` (the parsed text),
`delete_file` and `delete_store` answer structured data only.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from toolkit.server import Faults, Reply, ToolServer
from toolkit.signature import Op
from toolkit.wire import OWNER_HEADER, read_owner
from tools.file_search.chunking import ChunkingStrategy, sizes
from tools.file_search.embedders import EmbeddingFailed
from tools.file_search.engine import BadRequest, Engine, checked_id
from tools.file_search.filters import Filter
from tools.file_search.parse import UnparsableFile
from tools.file_search.settings import FileSearchSettings
from tools.file_search.store import Hit, Ranking
from tools.file_search.vectors import VectorsUnavailable

FAULTS = Faults("file_search", usage=(BadRequest, UnparsableFile), unavailable=(EmbeddingFailed, VectorsUnavailable))
INSTRUCTIONS = "Search the files of the vector stores named in each call; index and delete files of a store."
Attributes = dict[str, str | float | bool]


class Call:
    """A call's session state: file_search keeps nothing per session (the stores are per owner, on disk)."""

    async def aclose(self) -> None:
        return None


async def new_call(_key: str) -> Call:
    return Call()


class HybridSearch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    embedding_weight: float = Field(1.0, ge=0)
    text_weight: float = Field(1.0, ge=0)


class RankingOptions(BaseModel):
    """OpenAI's `ranking_options`: the ranker is the hybrid one here, whichever of its names is given."""

    model_config = ConfigDict(extra="forbid")
    ranker: Literal["auto", "default-2024-11-15"] = "auto"
    score_threshold: float = Field(0.0, ge=0, le=1)
    hybrid_search: HybridSearch | None = None

    def ranking(self) -> Ranking:
        weights = self.hybrid_search or HybridSearch()
        if weights.embedding_weight + weights.text_weight == 0:
            raise BadRequest("ranking_options.hybrid_search: the two weights must not both be 0")
        return Ranking(weights.embedding_weight, weights.text_weight, self.score_threshold)


class IndexedFile(BaseModel):
    file_id: str
    chunks: int
    usage_bytes: int


class Deleted(BaseModel):
    id: str
    deleted: bool


@contextlib.contextmanager
def refused() -> Iterator[None]:
    """A body's argument checks: what they refuse is the call's error, in their words (a body runs before the
    kit's fault handling, so it answers `ToolError` itself)."""
    try:
        yield
    except BadRequest as exc:
        raise ToolError(str(exc)) from exc


def _parsed(adapter: TypeAdapter[Any], value: Any, name: str) -> Any:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise BadRequest(f"{name}: {exc.errors()[0]['msg']} (at {exc.errors()[0]['loc']})") from exc


FILTER = TypeAdapter(Filter | None)
CHUNKING = TypeAdapter(ChunkingStrategy | None)
RANKING = TypeAdapter(RankingOptions | None)
ATTRIBUTES = TypeAdapter(Attributes | None)


def owner_of(ctx: Context) -> str:
    headers = getattr(ctx.request_context.request, "headers", None) or {}
    return read_owner(headers.get(OWNER_HEADER))


def render(hits: list[Hit]) -> Reply:
    """What the model reads: each result numbered, with its file and score, then its text."""
    if not hits:
        return Reply("No results.", {"results": []})
    blocks = [f"[{i}] {h.filename} (file_id {h.file_id}, score {h.score:.3f})\n{h.text}" for i, h in enumerate(hits)]
    data = [
        {"file_id": h.file_id, "filename": h.filename, "score": h.score, "attributes": h.attributes, "text": h.text}
        for h in hits
    ]
    return Reply("\n\n".join(blocks), {"results": data})


def build_server(settings: FileSearchSettings, engine: Engine) -> ToolServer[Call]:
    mcp = MCPServer("file_search", instructions=settings.instructions(INSTRUCTIONS))

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        try:
            yield
        finally:
            await engine.aclose()

    kit: ToolServer[Call] = ToolServer(mcp, settings, new_call, lifespan=lifespan)
    _writes(kit, settings, engine)
    _file_tools(kit, engine)
    _search(kit, settings, engine)
    return kit


def _decoded(content_base64: str, limit: int) -> bytes:
    if len(content_base64) > (limit + 2) // 3 * 4:
        raise BadRequest(f"the file is larger than this server indexes ({limit} bytes)")
    try:
        return base64.b64decode(content_base64, validate=True)
    except binascii.Error as exc:
        raise BadRequest(f"content_base64 is not base64: {exc}") from exc


def _writes(kit: ToolServer[Call], settings: FileSearchSettings, engine: Engine) -> None:
    """The tools that change a store: index a file, delete a file, delete the store."""

    @kit.tool("index_file", FAULTS, description="Index one file into a vector store (replacing an earlier copy).")
    def index_file(
        ctx: Context,
        vector_store_id: str,
        file_id: str,
        filename: str,
        content_base64: str,
        attributes: dict[str, Any] | None = None,
        chunking_strategy: dict[str, Any] | None = None,
        max_usage_bytes: int | None = None,
    ) -> Op[Call, IndexedFile]:
        with refused():
            owner, data = owner_of(ctx), _decoded(content_base64, settings.max_file_bytes)
            rule = sizes(_parsed(CHUNKING, chunking_strategy, "chunking_strategy"))
            checked_id(vector_store_id, "vector_store_id")
            file = {
                "file_id": checked_id(file_id, "file_id"),
                "filename": filename,
                "attributes": _parsed(ATTRIBUTES, attributes, "attributes") or {},
            }

        async def op(_: Call) -> IndexedFile:
            done = await engine.index_file(owner, vector_store_id, file, data, rule, max_usage_bytes)
            return IndexedFile(file_id=file_id, chunks=done.chunks, usage_bytes=done.usage_bytes)

        return op

    @kit.tool("delete_file", FAULTS, description="Remove one file from a vector store (out of search at once).")
    def delete_file(ctx: Context, vector_store_id: str, file_id: str) -> Op[Call, Deleted]:
        owner = owner_of(ctx)

        async def op(_: Call) -> Deleted:
            return Deleted(id=file_id, deleted=await engine.delete_file(owner, vector_store_id, file_id))

        return op

    @kit.tool("delete_store", FAULTS, description="Remove a vector store and everything indexed in it.")
    def delete_store(ctx: Context, vector_store_id: str) -> Op[Call, Deleted]:
        owner = owner_of(ctx)

        async def op(_: Call) -> Deleted:
            return Deleted(id=vector_store_id, deleted=await engine.delete_store(owner, vector_store_id))

        return op


class FileText(BaseModel):
    file_id: str
    text: str


class Updated(BaseModel):
    file_id: str
    attributes: Attributes


def _file_tools(kit: ToolServer[Call], engine: Engine) -> None:
    """The tools over one indexed file: its attributes replaced without embedding it again, its parsed text."""

    @kit.tool("set_attributes", FAULTS, description="Replace an indexed file's attributes (filters see them at once).")
    def set_attributes(
        ctx: Context, vector_store_id: str, file_id: str, attributes: dict[str, Any] | None
    ) -> Op[Call, Updated]:
        with refused():
            owner, new = owner_of(ctx), _parsed(ATTRIBUTES, attributes, "attributes") or {}

        async def op(_: Call) -> Updated:
            if not await engine.set_attributes(owner, vector_store_id, file_id, new):
                raise BadRequest(f"file {file_id} is not indexed in vector store {vector_store_id}")
            return Updated(file_id=file_id, attributes=new)

        return op

    @kit.tool("file_content", FAULTS, description="The parsed text of one indexed file.")
    def file_content(ctx: Context, vector_store_id: str, file_id: str) -> Op[Call, FileText]:
        owner = owner_of(ctx)

        async def op(_: Call) -> FileText:
            text = await engine.text(owner, vector_store_id, file_id)
            if text is None:
                raise BadRequest(f"file {file_id} is not indexed in vector store {vector_store_id}")
            return FileText(file_id=file_id, text=text)

        return op


def _search(kit: ToolServer[Call], settings: FileSearchSettings, engine: Engine) -> None:
    @kit.tool("search", FAULTS, description="Search the files of the named vector stores for passages on a query.")
    def search(
        ctx: Context,
        vector_store_ids: list[str],
        query: str,
        max_num_results: int = 10,
        filters: dict[str, Any] | None = None,
        ranking_options: dict[str, Any] | None = None,
    ) -> Op[Call, Reply]:
        if not 1 <= max_num_results <= settings.max_num_results:
            raise ToolError(f"max_num_results must be between 1 and {settings.max_num_results}")
        if not vector_store_ids:
            raise ToolError("vector_store_ids must name at least one vector store")
        with refused():
            owner, where = owner_of(ctx), _parsed(FILTER, filters, "filters")
            ranking = (_parsed(RANKING, ranking_options, "ranking_options") or RankingOptions()).ranking()

        async def op(_: Call) -> Reply:
            return render(await engine.search(owner, vector_store_ids, query, max_num_results, where, ranking))

        return op
