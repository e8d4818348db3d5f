"""`web_search_call` items: the `browser` tool (search, open, find). The item opens once the call is
complete (its action needs the arguments); actions, sources and url_citation annotations come from the
browser's structuredContent, never from parsing the page text."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from openai_harmony import Message, ToolNamespaceConfig

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import EchoContext, Field, Kind, Parsing, Stream
from orchestrator.request.params import HONOURED, NO_OP
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import Item, new_id
from orchestrator.responses.run import Run
from orchestrator.tools import ToolOutcome

_WEB_ACTIONS = {"search": "search", "open_page": "open", "find": "find", "find_in_page": "find"}
CONTEXT_SIZES = ("low", "medium", "high")


class WebSearchKind(Kind):
    """`web_search` / `web_search_preview` tools enable the `browser` namespace; their options travel as the
    browser session's headers."""

    tool_types = ("web_search_preview", "web_search", "web_search_2025_08_26", "web_search_preview_2025_03_11")
    echoes = ("web_search_call",)
    reads_kept_text = True
    namespaces = ("browser",)
    rerun_safe = frozenset(("search", "open", "find"))  # reads of the web or the local corpus, nothing written

    fields = {
        "filters": Field(HONOURED, "`allowed_domains`: the browser searches and opens only those"),
        "external_web_access": Field(HONOURED, "false: the browser reads its local corpus only"),
        "search_context_size": Field(HONOURED, "sent to the browser (`x-browser-context-size`)"),
        "user_location": Field(HONOURED, "sent to the browser (`x-browser-user-location`)"),
        "search_content_types": Field(NO_OP, "results are text; `image` has no effect (Codex sends it)"),
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        out.builtins.setdefault("browser", {}).update(browser_headers(tool, where))

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        return Requirement("browser.", "<|channel|>analysis to=browser.") if "browser" in tools.builtins else None

    def fallback(self, ns: str) -> h.Namespace:
        return h.Namespace(ns, h.SystemContent.new().with_browser_tool().tools["browser"].description)

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "browser" and "browser" in toolset.builtins

    def arguments(self, r: Run, msg: Message, ns: str, fn: str) -> tuple[dict[str, Any], str | None]:
        args, err = super().arguments(r, msg, ns, fn)
        if fn not in ("search", "open", "find"):
            err = f"Error: the browser has no function `{fn}`; use search, open or find."
        return args, err

    def begin(self, r: Run, msg: Message, ns: str, fn: str, args: dict[str, Any], stream: Stream | None) -> Item:
        action = _action(r, fn, args)  # the item opens once the call is complete: its action needs the arguments
        item = r.builder.add_item(
            {"id": new_id("ws"), "type": "web_search_call", "status": "in_progress", "action": action}
        )
        item.event("response.web_search_call.in_progress")
        item.event("response.web_search_call.searching")
        return item

    def end(self, r: Run, item: Item, fn: str, outcome: ToolOutcome) -> None:
        action = item.get("action")
        page = browser_page(outcome.structured) if not outcome.is_error else None
        if page is not None:  # the server's structuredContent, never a parse of the page text
            r.tools.pages[page["cursor"]] = page
            if page["url"] and fn in ("open", "find"):
                action["url"] = page["url"]
            if fn == "search" and "web_search_call.action.sources" in r.include:
                action["sources"] = [{"type": "url", "url": hit["url"]} for hit in page["hits"]]
        r.tools.results[item.id] = outcome.text  # kept with the response: history may cite it
        status = "failed" if outcome.is_error else "completed"
        shown = {"results": read_results(fn, page, outcome.text)} if "web_search_call.results" in r.include else {}
        item.finish(status, "response.web_search_call.completed", action=action, **shown)

    def chat_functions(self, ns: h.Namespace) -> list[dict[str, Any]]:
        if ns.tools:
            return list(ns.tools)
        tools = ToolNamespaceConfig.browser().tools  # not listed (server down): the tools gpt-oss was trained on
        return [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        action = item.get("action") or {}
        fn = _WEB_ACTIONS.get(action.get("type"), "search")
        args = {k: v for k, v in action.items() if k in ("query", "pattern") or (k == "url" and fn == "open")}
        if "url" in args:
            args["id"] = args.pop("url")
        return [
            h.assistant(json.dumps(args), "analysis", f"browser.{fn}", "json"),
            h.tool_result(f"browser.{fn}", _kept_text(item, ctx.results), "analysis"),
        ]


def browser_headers(tool: dict[str, Any], where: str) -> dict[str, str]:
    """A web_search tool's options as the browser's x-browser-* request headers (DESIGN: browser options)."""
    out: dict[str, str] = {}
    domains = (tool.get("filters") or {}).get("allowed_domains") if isinstance(tool.get("filters"), dict) else None
    if domains is not None:
        if not isinstance(domains, list) or not all(isinstance(d, str) and d and "," not in d for d in domains):
            raise RequestError("filters.allowed_domains must be a list of domain names", f"{where}.filters")
        if domains:
            out["x-browser-allowed-domains"] = ",".join(domains)
    if tool.get("external_web_access") is False:
        out["x-browser-external-access"] = "off"
    if (size := tool.get("search_context_size")) is not None:
        if size not in CONTEXT_SIZES:
            raise RequestError("search_context_size must be low, medium or high", f"{where}.search_context_size")
        out["x-browser-context-size"] = size
    if (location := tool.get("user_location")) is not None:
        if not isinstance(location, dict):
            raise RequestError("user_location must be an object", f"{where}.user_location")
        out["x-browser-user-location"] = json.dumps(location, separators=(",", ":"))
    return out


def _action(r: Run, fn: str, args: dict[str, Any]) -> dict[str, Any]:
    if fn == "search":
        return {"type": "search", "query": str(args.get("query", "")), "sources": None}
    pages = r.tools.pages
    page = pages.get(int(args["cursor"])) if isinstance(args.get("cursor"), int) else None
    if page is None and pages:
        page = pages[max(pages)]
    url = (page or {}).get("url") or ""
    if fn == "find":
        return {"type": "find_in_page", "pattern": str(args.get("pattern", "")), "url": url}
    target = args.get("id")
    return {"type": "open_page", "url": target if isinstance(target, str) else url or None}


def read_results(fn: str, page: dict[str, Any] | None, text: str) -> list[dict[str, str]]:
    """`include: web_search_call.results`: what the call read, as `{url, title, text}` entries (the shape of a
    file_search result; the SDK's web_search_call type has no such field, so it is ours): a search's hits, each
    with its snippet, or the page an open or find read, with the text the model was shown. A failed call read
    nothing."""
    if page is None:
        return []
    if fn == "search":
        return [{"url": hit["url"], "title": hit["title"], "text": hit["snippet"]} for hit in page["hits"]]
    return [{"url": page["url"] or "", "title": page["title"], "text": text}]


def _kept_text(item: dict[str, Any], results: dict[str, str]) -> str:
    """What the model saw for an earlier web_search_call the client sends back in its own history."""
    if (kept := results.get(str(item.get("id")))) is not None:
        return kept
    action = item.get("action") or {}
    urls = [s.get("url") for s in action.get("sources") or [] if isinstance(s, dict) and s.get("url")]
    if urls:
        return "(earlier result; only its sources are kept)\n" + "\n".join(f"* {u}" for u in urls)
    if action.get("url"):
        return f"(earlier result for {action['url']}; its text is not kept)"
    return "(earlier result not kept)"


def browser_page(structured: dict[str, Any] | None) -> dict[str, Any] | None:
    """The browser's structuredContent for one page: {cursor, url, title, lines, hits}, or None when absent.

    A find page's url and title are already its source page's; a search page has its hits, each with
    the lines it fills, so a citation of those lines resolves to the hit."""
    s = structured or {}
    if not isinstance(s.get("cursor"), int):
        return None
    hits = [
        {"url": h["url"], "title": str(h.get("title") or h["url"]), "lines": h.get("lines")}
        | {"snippet": str(h.get("snippet") or "")}
        for h in s.get("hits") or []
        if isinstance(h, dict) and isinstance(h.get("url"), str)
    ]
    url = s.get("url") if isinstance(s.get("url"), str) else None
    return {"cursor": s["cursor"], "url": url, "title": str(s.get("title") or url or ""), "hits": hits}


def _cited(page: dict[str, Any], line: int) -> tuple[str, str] | None:
    """(title, url) that a citation of `line` of this page stands for: the page itself, or a search hit."""
    for hit in page.get("hits") or []:
        span = hit.get("lines")
        if isinstance(span, list) and len(span) == 2 and span[0] <= line <= span[1]:
            return hit["title"], hit["url"]
    return (page["title"], page["url"]) if page.get("url") else None


CITATION = re.compile(r"【(\d+)†L(\d+)(?:-L(\d+))?】")


def cite(r: Run, text: str) -> tuple[str, list[dict[str, Any]]]:
    """The answer as the client reads it: each `【cursor†Lstart-Lend】` citation the model wrote becomes the
    markdown link it stands for, `([domain](url))`, spanned by its `url_citation` annotation (as OpenAI's
    hosted search answers); a citation of no page this response has seen is dropped. Pure in the pages
    seen, so rewriting pieces that never split a citation gives the same text as rewriting the whole."""
    pieces: list[str] = []
    found: list[dict[str, Any]] = []
    position = 0
    for m in CITATION.finditer(text):
        pieces.append(text[position : m.start()])
        position = m.end()
        page = r.tools.pages.get(int(m.group(1)))
        target = _cited(page, int(m.group(2))) if page else None
        if target is None:
            continue
        title, url = target
        start = sum(map(len, pieces))
        link = f"([{urlsplit(url).hostname or url}]({url}))"
        pieces.append(link)
        span = {"start_index": start, "end_index": start + len(link)}
        found.append({"type": "url_citation", **span, "url": url, "title": title})
    pieces.append(text[position:])
    return "".join(pieces), found
