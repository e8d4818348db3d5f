"""`file_search_call` items: retrieval over the caller's vector stores, through the `file_search` tool server.

Neither openai-harmony nor gpt-oss defines a retrieval tool (only `browser` and `python`), so the model is
shown a plain namespace of our own, `file_search`, with one function `search({queries: [str]})` (the same
function on the chat path). The request's `vector_store_ids`, `max_num_results`, `filters` and
`ranking_options` never reach the model: each query is one call of the tool server's `search` with them,
signed with the caller's key like every fleet call (`ToolSessions`). The server also lists its store-writing
tools (`index_file`, ...), so the model is shown this kind's namespace, never the server's listing.

Citations: the model reads each result under a marker `【M:I†filename】` (M: the position of this tool answer in
the conversation, I: the result's number in it) and is asked to copy the marker after what the passage
supports. In the answer each marker of a result this response found is removed and becomes a `file_citation`
annotation (`file_id`, `filename`, `index`: where the marker stood); a marker of no such result is removed
without one. The markers are this response's (`ToolState.sources`, not stored): a `file_search_call` sent back
as input is shown with its results (when it carries them) but no markers, so a later answer cites only what
its own response found.
"""

from __future__ import annotations

import json
import re
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import EchoContext, Field, Kind, Parsing, Stream, invoke
from orchestrator.request.params import HONOURED
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import Item, new_id
from orchestrator.responses.run import Run
from orchestrator.tools import ToolOutcome

NS = "file_search"
MAX_RESULTS = 50
DEFAULT_RESULTS = 10
MAX_QUERIES = 5
COMPARISONS = ("eq", "ne", "gt", "gte", "lt", "lte")
RANKERS = ("auto", "default-2024-11-15")
DESCRIPTION = (
    "Search the files the user has made available to you. Results come back as passages, each under a marker "
    "such as 【3:0†report.pdf】. When your answer uses a passage, write its marker, exactly as shown, right "
    "after the sentence it supports."
)
SEARCH = {
    "name": "search",
    "description": "Search the user's files for passages relevant to each query (one to five queries).",
    "parameters": {
        "type": "object",
        "properties": {
            "queries": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Self-contained search queries, each phrased for a keyword and a semantic search",
            }
        },
        "required": ["queries"],
    },
}
CITATION = re.compile(r"【(\d+):(\d+)(?:†[^】]*)?】")


class FileSearchKind(Kind):
    """One `file_search` tool per request enables the `file_search` namespace; its options are kept in
    `Toolset.file_search` and sent with every call."""

    tool_types = ("file_search",)
    echoes = ("file_search_call",)
    namespaces = (NS,)
    listed = False  # the server's listing has the store-writing tools too: the model sees `fallback`

    fields = {
        "vector_store_ids": Field(HONOURED, "the caller's stores (another key's or a missing one: 404) searched"),
        "max_num_results": Field(HONOURED, f"results per call, 1 to {MAX_RESULTS} (default {DEFAULT_RESULTS})"),
        "filters": Field(HONOURED, "comparison (eq, ne, gt, gte, lt, lte) and compound (and, or) on attributes"),
        "ranking_options": Field(HONOURED, "`ranker`, `score_threshold` and `hybrid_search` weights (BM25 + vector)"),
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        if out.file_search is not None:
            raise RequestError("only one file_search tool per request", f"{where}.type")
        out.file_search = {
            "where": where,
            "vector_store_ids": _store_ids(tool.get("vector_store_ids"), f"{where}.vector_store_ids"),
            "max_num_results": _max_results(tool.get("max_num_results"), f"{where}.max_num_results"),
            "filters": _filter(tool["filters"], f"{where}.filters") if tool.get("filters") is not None else None,
            "ranking_options": _ranking(tool.get("ranking_options"), f"{where}.ranking_options"),
        }
        out.builtins.setdefault(NS, {})

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        return Requirement(f"{NS}.", f"<|channel|>analysis to={NS}.") if NS in tools.builtins else None

    def echo_tool(self, tool: dict[str, Any]) -> dict[str, Any]:
        ranking = {"ranker": "auto", "score_threshold": 0.0} | (tool.get("ranking_options") or {})
        defaults = {"filters": None, "max_num_results": DEFAULT_RESULTS}
        return defaults | dict(tool) | {"ranking_options": ranking}

    def fallback(self, ns: str) -> h.Namespace:
        return h.Namespace(NS, DESCRIPTION, (SEARCH,))

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == NS and NS in toolset.builtins

    def arguments(self, r: Run, msg: Message, ns: str, fn: str) -> tuple[dict[str, Any], str | None]:
        args, err = super().arguments(r, msg, ns, fn)
        queries = args.get("queries")
        if err is None and fn != "search":
            err = f"Error: {NS} has no function `{fn}`; use search."
        ok = isinstance(queries, list) and 0 < len(queries) <= MAX_QUERIES
        if err is None and not (ok and all(isinstance(q, str) and q.strip() for q in queries)):
            err = f"Error: search needs `queries`, a list of one to {MAX_QUERIES} non-empty strings."
        return args, err

    def begin(self, r: Run, msg: Message, ns: str, fn: str, args: dict[str, Any], stream: Stream | None) -> Item:
        queries = [q for q in args.get("queries") or [] if isinstance(q, str)]
        item = r.builder.add_item(
            {"id": new_id("fs"), "type": "file_search_call", "queries": queries, "status": "in_progress"}
        )
        item.event("response.file_search_call.in_progress")
        item.update(status="searching")
        item.event("response.file_search_call.searching")
        return item

    async def run(self, r: Run, ns: str, fn: str, args: dict[str, Any]) -> ToolOutcome:
        """Each query is one call of the server's `search` over the request's stores; the results, merged
        (a passage found twice once, at its best score), are numbered for the model to cite."""
        spec = r.toolset.file_search or {}
        options = {k: spec.get(k) for k in ("vector_store_ids", "max_num_results", "filters", "ranking_options")}
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for query in args["queries"]:
            outcome = await invoke(r, NS, "search", {**options, "query": query})
            if outcome.is_error:
                return outcome
            for hit in (outcome.structured or {}).get("results") or []:
                key = (str(hit.get("file_id")), str(hit.get("text")))
                if key not in found or hit.get("score", 0) > found[key].get("score", 0):
                    found[key] = hit
        best = sorted(found.values(), key=lambda hit: -float(hit.get("score") or 0))[: spec.get("max_num_results")]
        return ToolOutcome(_numbered(r, best), structured={"results": best})

    def end(self, r: Run, item: Item, fn: str, outcome: ToolOutcome) -> None:
        if outcome.is_error:
            item.finish("failed", "response.file_search_call.completed", results=None)
            return
        results = (outcome.structured or {}).get("results") or []
        shown = [_result(hit) for hit in results] if "file_search_call.results" in r.include else None
        item.finish("completed", "response.file_search_call.completed", results=shown)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        queries = item.get("queries")
        if not isinstance(queries, list):
            raise RequestError("a file_search_call needs its queries", f"{where}.queries")
        results = item.get("results") or []
        text = "\n\n".join(f"{x.get('filename')}:\n{x.get('text')}" for x in results if isinstance(x, dict))
        return [
            h.assistant(json.dumps({"queries": queries}), "analysis", f"{NS}.search", "json"),
            h.tool_result(f"{NS}.search", text or "(earlier results not kept)", "analysis"),
        ]


def _store_ids(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise RequestError("vector_store_ids must be a non-empty list of vector store ids", where)
    for j, store_id in enumerate(value):
        if not isinstance(store_id, str) or not store_id:
            raise RequestError("each vector store id must be a non-empty string", f"{where}[{j}]")
    if len(set(value)) != len(value):
        raise RequestError("vector_store_ids names a store twice", where)
    return list(value)


def _max_results(value: Any, where: str) -> int:
    if value is None:
        return DEFAULT_RESULTS
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RESULTS:
        raise RequestError(f"max_num_results must be an integer from 1 to {MAX_RESULTS}", where)
    return value


def _filter(value: Any, where: str) -> dict[str, Any]:
    """A comparison or compound filter, checked here so a bad one is a 400 before the model runs."""
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("and", "or"):
        inner = value.get("filters")
        if set(value) - {"type", "filters"} or not isinstance(inner, list) or not inner:
            raise RequestError(f"a compound filter ({kind}) has a non-empty list `filters` and nothing else", where)
        return {"type": kind, "filters": [_filter(f, f"{where}.filters[{j}]") for j, f in enumerate(inner)]}
    if kind in ("in", "nin"):
        raise RequestError(f"comparison {kind!r} is not supported by this server (eq, ne, gt, gte, lt, lte)", where)
    if kind not in COMPARISONS:
        raise RequestError("a filter's type must be eq, ne, gt, gte, lt, lte, and or or", f"{where}.type")
    if set(value) != {"type", "key", "value"} or not isinstance(value["key"], str):
        raise RequestError("a comparison filter has `type`, `key` (a string) and `value`, and nothing else", where)
    if not isinstance(value["value"], str | int | float | bool):
        raise RequestError("a comparison's value must be a string, a number or a boolean", f"{where}.value")
    return dict(value)


def _ranking(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"ranker", "score_threshold", "hybrid_search"}:
        raise RequestError("ranking_options has `ranker`, `score_threshold` and `hybrid_search` only", where)
    if value.get("ranker") not in (None, *RANKERS):
        raise RequestError(f"ranker must be one of {', '.join(RANKERS)}", f"{where}.ranker")
    threshold = value.get("score_threshold")
    if threshold is not None and not (_number(threshold) and 0 <= threshold <= 1):
        raise RequestError("score_threshold must be a number from 0 to 1", f"{where}.score_threshold")
    if (hybrid := value.get("hybrid_search")) is not None:
        _weights(hybrid, f"{where}.hybrid_search")
    return {k: v for k, v in value.items() if v is not None}


def _weights(value: Any, where: str) -> None:
    keys = ("embedding_weight", "text_weight")
    if not isinstance(value, dict) or set(value) != set(keys):
        raise RequestError("hybrid_search has `embedding_weight` and `text_weight`, and nothing else", where)
    for key in keys:
        if not (_number(value[key]) and value[key] >= 0):
            raise RequestError(f"{key} must be a number of at least 0", f"{where}.{key}")
    if value["embedding_weight"] + value["text_weight"] == 0:
        raise RequestError("the two hybrid_search weights must not both be 0", where)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _result(hit: dict[str, Any]) -> dict[str, Any]:
    """A result as the item shows it (under `include: ["file_search_call.results"]`)."""
    return {k: hit.get(k) for k in ("file_id", "filename", "score", "attributes", "text")}


def _numbered(r: Run, results: list[dict[str, Any]]) -> str:
    """What the model reads: each result under its marker (kept for `cite`), with its score, then its text."""
    if not results:
        return "No results."
    answer_at = len(r.messages)  # where this tool answer goes in the conversation: markers never repeat
    blocks = []
    for i, hit in enumerate(results):
        filename = str(hit.get("filename") or hit.get("file_id"))
        r.tools.sources[f"{answer_at}:{i}"] = {"file_id": str(hit.get("file_id")), "filename": filename}
        blocks.append(f"【{answer_at}:{i}†{filename}】 (score {float(hit.get('score') or 0):.3f})\n{hit.get('text')}")
    return "\n\n".join(blocks)


def cite(r: Run, text: str, spans: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The answer without its file markers, and a `file_citation` at each marker's place for a result of this
    response; `spans` (the url_citations already in `text`) move with the text the markers leave. Pure in the
    results found, so pieces that never split a marker rewrite as the whole does."""
    pieces: list[str] = []
    found: list[dict[str, Any]] = []
    position = 0
    for m in CITATION.finditer(text):
        pieces.append(text[position : m.start()])
        position = m.end()
        kept = sum(map(len, pieces))
        for span in spans:  # after the marker: shifted by what was removed so far
            if span["start_index"] >= m.end() - (m.start() - kept):
                span["start_index"] -= len(m.group(0))
                span["end_index"] -= len(m.group(0))
        if (source := r.tools.sources.get(f"{m.group(1)}:{m.group(2)}")) is not None:
            found.append({"type": "file_citation", **source, "index": kept})
    pieces.append(text[position:])
    return "".join(pieces), found
