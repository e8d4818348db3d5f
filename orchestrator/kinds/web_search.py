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
from orchestrator.events import new_id
from orchestrator.kinds.base import EchoContext, Kind, Stream, invoke, rejected, tool_args
from orchestrator.run import Run
from orchestrator.schema import Toolset
from orchestrator.tools import ToolOutcome

_WEB_ACTIONS = {"search": "search", "open_page": "open", "find": "find", "find_in_page": "find"}


class WebSearchKind(Kind):
    echoes = ("web_search_call",)
    namespaces = ("browser",)

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "browser" and "browser" in toolset.builtins

    async def call(self, r: Run, msg: Message, ns: str, fn: str, stream: Stream | None) -> ToolOutcome:
        b = r.builder
        args, err = tool_args(h.text_of(msg))
        action = _action(r, fn, args or {})
        index = b.add_item({"id": new_id("ws"), "type": "web_search_call", "status": "in_progress", "action": action})
        b.item_event(index, "response.web_search_call.in_progress")
        b.item_event(index, "response.web_search_call.searching")
        if fn not in ("search", "open", "find"):
            err = f"Error: the browser has no function `{fn}`; use search, open or find."
        outcome = rejected(err) if err else await invoke(r, "browser", fn, args or {})
        page = browser_page(outcome.structured) if not outcome.is_error else None
        if page is not None:  # the server's structuredContent, never a parse of the page text
            r.tools.pages[page["cursor"]] = page
            if page["url"] and fn in ("open", "find"):
                action["url"] = page["url"]
            if fn == "search" and "web_search_call.action.sources" in r.include:
                action["sources"] = [{"type": "url", "url": hit["url"]} for hit in page["hits"]]
        r.tools.results[b.output[index]["id"]] = outcome.text  # kept with the response: history may cite it
        b.output[index].update(status="failed" if outcome.is_error else "completed", action=action)
        b.item_event(index, "response.web_search_call.completed")
        b.done_item(index)
        return outcome

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
        return [h.assistant(json.dumps(args), "analysis", f"browser.{fn}", "json"),
                h.tool_result(f"browser.{fn}", _kept_text(item, ctx.results), "analysis")]  # fmt: skip


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
    hits = [{"url": h["url"], "title": str(h.get("title") or h["url"]), "lines": h.get("lines")}
            for h in s.get("hits") or [] if isinstance(h, dict) and isinstance(h.get("url"), str)]  # fmt: skip
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
