"""The real file_search server (a subprocess, the real model) through a real MCP client: index, search with
filters and ranking options, delete, per-owner isolation and the errors of bad input."""

from __future__ import annotations

import base64
import io
from typing import Any

from mcp.client.session import ClientSession
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from tests.support.mcp2 import mcp_session
from tests.support.service import Service
from toolkit.wire import OWNER_HEADER, sign_owner

ALICE = {OWNER_HEADER: sign_owner("test-alice")}
BOB = {OWNER_HEADER: sign_owner("test-bob")}
FACTS = {
    "otters.md": "# Otters\n\nSea otters hold hands while they sleep so that they do not drift apart.",
    "volcano.txt": "Mount Erebus in Antarctica has a persistent lava lake at its summit crater.",
    "bread.html": "<h1>Bread</h1><p>Sourdough rises because <a href='https://b.test/'>wild yeast</a> ferments it.",
}


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def pdf_with(text: str) -> bytes:
    """A one-page PDF whose content stream shows `text` in Helvetica."""
    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1")})
    font[NameObject("/BaseFont")] = NameObject("/Helvetica")
    fonts = DictionaryObject({NameObject("/F1"): writer._add_object(font)})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
    stream = DecodedStreamObject()
    stream.set_data(f"BT /F1 12 Tf 72 700 Td ({text}) Tj ET".encode())
    page[NameObject("/Contents")] = writer._add_object(stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


async def call(session: ClientSession, name: str, **args: Any) -> tuple[str, dict[str, Any]]:
    result = await session.call_tool(name, args)
    assert not result.is_error, result.content[0].text
    return result.content[0].text, result.structured_content or {}


async def error(session: ClientSession, name: str, **args: Any) -> str:
    result = await session.call_tool(name, args)
    assert result.is_error, result.content[0].text
    return result.content[0].text


async def index(session: ClientSession, store: str, file_id: str, name: str, data: str | bytes, **kw: Any) -> dict:
    _, done = await call(
        session, "index_file", vector_store_id=store, file_id=file_id, filename=name, content_base64=b64(data), **kw
    )
    return done


async def test_index_search_filter_and_delete(file_search: Service) -> None:
    async with mcp_session(file_search.url, "streamable-http", ALICE) as s:
        for i, (name, text) in enumerate(FACTS.items()):
            done = await index(s, "vs_a", f"file-{i}", name, text, attributes={"n": i, "kind": name.split(".")[1]})
            assert done["chunks"] == 1 and done["usage_bytes"] > 0
        done = await index(s, "vs_a", "file-pdf", "report.pdf", pdf_with("Quarterly revenue grew by 42 percent"))
        assert done["chunks"] == 1

        text, data = await call(s, "search", vector_store_ids=["vs_a"], query="why does sourdough rise?")
        assert data["results"][0]["file_id"] == "file-2"
        assert "because wild yeast ferments" in data["results"][0]["text"]  # the link's text, not its marker
        assert text.startswith("[0] bread.html (file_id file-2")
        _, data = await call(s, "search", vector_store_ids=["vs_a"], query="how much did revenue grow")
        assert data["results"][0]["filename"] == "report.pdf"

        where = {
            "type": "or",
            "filters": [{"type": "eq", "key": "kind", "value": "txt"}, {"type": "gte", "key": "n", "value": 2}],
        }
        _, data = await call(s, "search", vector_store_ids=["vs_a"], query="animals sleeping", filters=where)
        assert {r["file_id"] for r in data["results"]} == {"file-1", "file-2"}
        _, data = await call(
            s,
            "search",
            vector_store_ids=["vs_a"],
            query="otters",
            max_num_results=1,
            ranking_options={"score_threshold": 0.5, "hybrid_search": {"text_weight": 2}},
        )
        assert [r["file_id"] for r in data["results"]] == ["file-0"] and 0.5 <= data["results"][0]["score"] <= 1

        await index(s, "vs_a", "file-0", "otters.md", "Penguins live in the southern hemisphere.")  # re-added
        _, data = await call(s, "search", vector_store_ids=["vs_a"], query="otters hold hands")
        assert all("Sea otters" not in r["text"] for r in data["results"])
        _, gone = await call(s, "delete_file", vector_store_id="vs_a", file_id="file-2")
        assert gone == {"id": "file-2", "deleted": True}
        _, data = await call(s, "search", vector_store_ids=["vs_a"], query="sourdough wild yeast")
        assert "file-2" not in {r["file_id"] for r in data["results"]}


async def test_another_owner_sees_nothing_and_a_deleted_store_is_gone(file_search: Service) -> None:
    async with mcp_session(file_search.url, "streamable-http", ALICE) as s:
        await index(s, "vs_b", "file-x", "volcano.txt", FACTS["volcano.txt"])
    async with mcp_session(file_search.url, "streamable-http", BOB) as s:
        text, data = await call(s, "search", vector_store_ids=["vs_b"], query="lava lake")
        assert data["results"] == [] and text == "No results."
        _, gone = await call(s, "delete_store", vector_store_id="vs_b")
        assert gone["deleted"] is False
    async with mcp_session(file_search.url, "streamable-http", ALICE) as s:
        _, data = await call(s, "search", vector_store_ids=["vs_b"], query="lava lake")
        assert data["results"][0]["file_id"] == "file-x"
        _, gone = await call(s, "delete_store", vector_store_id="vs_b")
        assert gone["deleted"] is True
        _, data = await call(s, "search", vector_store_ids=["vs_b"], query="lava lake")
        assert data["results"] == []


async def test_bad_input_is_refused_with_its_reason(file_search: Service) -> None:
    async with mcp_session(file_search.url, "streamable-http", ALICE) as s:

        def idx(**kw: Any) -> dict[str, Any]:
            return {
                "vector_store_id": "vs_c",
                "file_id": "f",
                "filename": "a.txt",
                "content_base64": b64("x y z"),
                **kw,
            }

        assert "unsupported file type '.exe'" in await error(s, "index_file", **idx(filename="a.exe"))
        assert "no text to index" in await error(s, "index_file", **idx(content_base64=b64("  \n")))
        assert "PDF could not be read" in await error(s, "index_file", **idx(filename="a.pdf"))
        assert "not base64" in await error(s, "index_file", **idx(content_base64="%%%"))
        assert "vector_store_id must be" in await error(s, "index_file", **idx(vector_store_id="../etc"))
        bad_chunking = {"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 150}}
        assert "half of max_chunk_size_tokens" in await error(s, "index_file", **idx(chunking_strategy=bad_chunking))
        assert "max_num_results must be between 1 and 50" in await error(
            s, "search", vector_store_ids=["vs_c"], query="q", max_num_results=51
        )
        assert "filters:" in await error(
            s, "search", vector_store_ids=["vs_c"], query="q", filters={"type": "regex", "key": "k", "value": "v"}
        )
        assert "ranking_options:" in await error(
            s, "search", vector_store_ids=["vs_c"], query="q", ranking_options={"ranker": "none"}
        )
        _, data = await call(s, "search", vector_store_ids=["vs_c"], query="anything")  # the store was never made
        assert data["results"] == []


async def test_static_chunking_cuts_long_text_into_overlapping_windows(file_search: Service) -> None:
    words = " ".join(f"word{i}" for i in range(600))
    rule = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 50}}
    async with mcp_session(file_search.url, "streamable-http", ALICE) as s:
        done = await index(s, "vs_d", "file-long", "long.txt", words, chunking_strategy=rule)
        _, data = await call(s, "search", vector_store_ids=["vs_d"], query="word300", max_num_results=50)
    assert done["chunks"] == len(data["results"]) > 10
    assert any("word300" in r["text"] for r in data["results"][:2])


async def test_attributes_change_in_place_content_is_kept_and_a_budget_refuses_before_adding(
    file_search: Service,
) -> None:
    async with mcp_session(file_search.url, "streamable-http", ALICE) as s:
        await index(s, "vs_attr", "file-m", "moon.md", "# Moon\n\nThe Moon drifts 3.8 cm from Earth each year.")
        _, done = await call(s, "set_attributes", vector_store_id="vs_attr", file_id="file-m", attributes={"n": 2})
        assert done == {"file_id": "file-m", "attributes": {"n": 2}}
        where = {"type": "eq", "key": "n", "value": 2}
        _, found = await call(s, "search", vector_store_ids=["vs_attr"], query="moon", filters=where)
        assert [r["attributes"] for r in found["results"]] == [{"n": 2}]
        _, content = await call(s, "file_content", vector_store_id="vs_attr", file_id="file-m")
        assert content["text"] == "# Moon\n\nThe Moon drifts 3.8 cm from Earth each year."
        for name in ("set_attributes", "file_content"):
            extra = {"attributes": {}} if name == "set_attributes" else {}
            assert "not indexed" in await error(s, name, vector_store_id="vs_attr", file_id="file-none", **extra)
        text = "Venus turns backwards."
        args = {"vector_store_id": "vs_attr", "file_id": "file-v", "filename": "v.txt", "content_base64": b64(text)}
        assert "max-vector-store-bytes-per-key" in await error(s, "index_file", max_usage_bytes=10, **args)
        _, gone = await call(s, "search", vector_store_ids=["vs_attr"], query="Venus turns backwards")
        assert "file-v" not in {r["file_id"] for r in gone["results"]}
        await call(s, "delete_store", vector_store_id="vs_attr")
