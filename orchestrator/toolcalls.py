"""Built-in and MCP tool calls of the turn loop, with their output items and events.

`browser.*` becomes a `web_search_call`, `python` a `code_interpreter_call`, `container.*` and any
other MCP server's tools an `mcp_call` (after an `mcp_approval_request` where approval is required).
Whatever goes wrong, the model gets a tool message saying so and the loop goes on.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.events import new_id
from orchestrator.items import mcp_error
from orchestrator.tools import ToolOutcome

if TYPE_CHECKING:
    from orchestrator.turns import Run


LIMIT_REACHED = "Error: the tool-call limit of this response is reached; answer now without tools."


def admit(r: Run) -> bool:
    """Count a call the model started writing; True while it is within the response's `max_tool_calls`."""
    r.tool_calls += 1
    return r.tool_calls <= r.limits.max_tool_calls


def classify(r: Run, recipient: str) -> tuple[str, str, str]:
    """(kind, namespace, function) of a recipient: kind is browser, python, mcp, approval or unknown."""
    ns, _, fn = recipient.partition(".")
    fn = fn.split(" ")[0]
    if ns == "browser" and "browser" in r.toolset.builtins:
        return "browser", ns, fn
    if ns == "python" and "python" in r.toolset.builtins:
        return "python", ns, "python"
    if ns == "container" and "container" in r.toolset.builtins:
        return ("shell" if fn == "exec" and r.toolset.shell_for_container else "mcp"), ns, fn
    if ns in r.toolset.mcp:
        server = r.toolset.mcp[ns]
        allowed = server.allowed is None or fn in server.allowed
        return ("approval" if allowed and server.needs_approval(fn) else "mcp"), ns, fn
    return "unknown", ns, fn


class ToolCaller:
    def __init__(self, run: Run) -> None:
        self.r = run

    def _answer(self, name: str, text: str, channel: str | None) -> None:
        self.r.messages.append(h.tool_result(name, text or "(no output)", channel))

    async def call(self, msg: Message) -> bool:
        """Run the call `msg` addresses; False when the response must stop for an approval."""
        r, recipient = self.r, msg.recipient or ""
        kind, ns, fn = classify(r, recipient)
        index = r.open_tool_index
        r.open_tool_index = None
        if kind == "approval":
            return self._request_approval(msg, ns, fn)
        if kind == "unknown":
            known = sorted([*r.toolset.builtins, *r.toolset.mcp]) + (["functions"] if r.toolset.functions else [])
            outcome = ToolOutcome(
                f"Error: unknown tool `{recipient}`. Available namespaces: {', '.join(known) or 'none'}.",
                True,
                outcome="rejected",
            )
        elif kind == "browser":
            outcome = await self._browser(msg, fn)
        elif kind == "python":
            outcome = await self._python(msg, index)
        elif kind == "shell":
            outcome = await self._shell(msg)
        else:
            outcome = await self._mcp(msg, ns, fn, index)
        if index is not None and r.builder.output[index].get("status") == "in_progress":
            r.builder.output[index]["status"] = "failed"
            r.builder.done_item(index)
        r.tool_log.append((ns if kind != "unknown" else "unknown", outcome.kind))
        self._answer(recipient, outcome.text, msg.channel)
        return True

    def refuse(self, msg: Message) -> None:
        """A call past `max_tool_calls`: not run and not an output item; only the model reads the refusal."""
        kind, ns, _ = classify(self.r, msg.recipient or "")
        if ns != "functions":  # client functions are not in the tool-call metrics
            self.r.tool_log.append((ns if kind != "unknown" else "unknown", "rejected"))
        self._answer(msg.recipient or "", LIMIT_REACHED, msg.channel)

    async def _invoke(self, ns: str, fn: str, args: dict[str, Any]) -> ToolOutcome:
        if (server := self.r.toolset.mcp.get(ns)) is not None:  # at the address its listing was checked at
            return await self.r.sessions.call(server.url, fn, args, server.headers, address=server.address,
                                              client_named=server.client_named)  # fmt: skip
        url = self.r.endpoints.url_for(ns)
        if url is None:
            return ToolOutcome(f"Error: no tool server is configured for `{ns}`.", True, outcome="unavailable")
        return await self.r.sessions.call(url, fn, args, self.r.toolset.builtins.get(ns, {}))

    async def _browser(self, msg: Message, fn: str) -> ToolOutcome:
        from orchestrator.turns import tool_args

        b, args_text = self.r.builder, h.text_of(msg)
        args, err = tool_args(args_text)
        action = self._web_action(fn, args or {})
        index = b.add_item({"id": new_id("ws"), "type": "web_search_call", "status": "in_progress", "action": action})
        b.item_event(index, "response.web_search_call.in_progress")
        b.item_event(index, "response.web_search_call.searching")
        if fn not in ("search", "open", "find"):
            err = f"Error: the browser has no function `{fn}`; use search, open or find."
        outcome = ToolOutcome(err, True, outcome="rejected") if err else await self._invoke("browser", fn, args or {})
        page = browser_page(outcome.structured) if not outcome.is_error else None
        if page is not None:  # the server's structuredContent, never a parse of the page text
            self.r.pages[page["cursor"]] = page
            if page["url"] and fn in ("open", "find"):
                action["url"] = page["url"]
            if fn == "search" and "web_search_call.action.sources" in self.r.include:
                action["sources"] = [{"type": "url", "url": hit["url"]} for hit in page["hits"]]
        self.r.results[b.output[index]["id"]] = outcome.text  # kept with the response: history may cite it
        item = b.output[index]
        item.update(status="failed" if outcome.is_error else "completed", action=action)
        b.item_event(index, "response.web_search_call.completed")
        b.done_item(index)
        return outcome

    def _web_action(self, fn: str, args: dict[str, Any]) -> dict[str, Any]:
        if fn == "search":
            return {"type": "search", "query": str(args.get("query", "")), "sources": None}
        page = self.r.pages.get(int(args["cursor"])) if isinstance(args.get("cursor"), int) else None
        if page is None and self.r.pages:
            page = self.r.pages[max(self.r.pages)]
        url = (page or {}).get("url") or ""
        if fn == "find":
            return {"type": "find_in_page", "pattern": str(args.get("pattern", "")), "url": url}
        target = args.get("id")
        return {"type": "open_page", "url": target if isinstance(target, str) else url or None}

    async def _python(self, msg: Message, index: int | None) -> ToolOutcome:
        b, code = self.r.builder, h.text_of(msg)
        if index is None:
            index = open_code_item(self.r)
            b.item_event(index, "response.code_interpreter_call_code.done", code=code)
        b.output[index].update(code=code, status="interpreting")
        b.item_event(index, "response.code_interpreter_call.interpreting")
        outcome = await self._invoke("python", "python", {"code": code})
        outputs: list[dict[str, Any]] = [{"type": "logs", "logs": outcome.text}] if outcome.text else []
        outputs += [{"type": "image", "url": url} for url in outcome.images]
        b.output[index].update(outputs=outputs, status="failed" if outcome.is_error else "completed")
        b.item_event(index, "response.code_interpreter_call.completed")
        b.done_item(index)
        return outcome

    async def _shell(self, msg: Message) -> ToolOutcome:
        """`container.exec` as a `shell_call` and its `shell_call_output` (the client sent a shell tool)."""
        from orchestrator.turns import tool_args

        b, r = self.r.builder, self.r
        args, err = tool_args(h.text_of(msg))
        cmd = (args or {}).get("cmd")
        if err is None and not (isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd)):
            err = "Error: container.exec needs `cmd`, a non-empty list of strings."
        command = shlex.join(cmd) if err is None else h.text_of(msg)
        timeout = (args or {}).get("timeout")
        call_id = new_id("call")
        timeout_ms = int(timeout * 1000) if isinstance(timeout, int | float) else None
        action = {"commands": [command], "timeout_ms": timeout_ms, "max_output_length": None}
        index = b.add_item({"id": new_id("sh"), "type": "shell_call", "call_id": call_id, "action": action,
                            "status": "in_progress", "environment": None})  # fmt: skip
        b.emit("response.shell_call_command.added", output_index=index, command_index=0, command="")
        b.emit("response.shell_call_command.delta", output_index=index, command_index=0, delta=command)
        b.emit("response.shell_call_command.done", output_index=index, command_index=0, command=command)
        b.output[index]["status"] = "completed"
        b.done_item(index)
        outcome = (
            ToolOutcome(err, True, outcome="rejected") if err else await self._invoke("container", "exec", args or {})
        )
        result = _shell_output(outcome)
        index = b.add_item({"id": new_id("sho"), "type": "shell_call_output", "call_id": call_id, "output": [],
                            "status": "in_progress", "max_output_length": None})  # fmt: skip
        delta = {k: result[k] for k in ("stdout", "stderr") if result[k]}
        if delta:
            b.item_event(index, "response.shell_call_output_content.delta", command_index=0, delta=delta)
        b.item_event(index, "response.shell_call_output_content.done", command_index=0, output=[result])
        b.output[index].update(output=[result], status="completed")
        b.done_item(index)
        r.results[b.output[index]["id"]] = outcome.text
        return outcome

    async def _mcp(self, msg: Message, ns: str, fn: str, index: int | None, approval_id: str | None = None):
        from orchestrator.turns import tool_args

        b, args_text = self.r.builder, h.text_of(msg)
        if index is None:
            index = open_mcp_item(self.r, ns, fn, approval_id)
            b.item_event(index, "response.mcp_call_arguments.done", arguments=args_text)
        b.output[index]["arguments"] = args_text
        args, err = tool_args(args_text)
        server = self.r.toolset.mcp.get(ns)
        if err is None and server is not None and server.allowed is not None and fn not in server.allowed:
            err = f"Error: the tool `{fn}` is not allowed on the `{ns}` server."
        outcome = ToolOutcome(err, True, outcome="rejected") if err else await self._invoke(ns, fn, args or {})
        item = b.output[index]
        if outcome.is_error:
            item.update(status="failed", error=mcp_error(outcome.kind, outcome.text))
            b.item_event(index, "response.mcp_call.failed")
        else:
            item.update(status="completed", output=outcome.text)
            b.item_event(index, "response.mcp_call.completed")
        b.done_item(index)
        return outcome

    def _request_approval(self, msg: Message, ns: str, fn: str) -> bool:
        b, approval_id = self.r.builder, new_id("mcpr")
        item = {"id": approval_id, "type": "mcp_approval_request", "server_label": ns, "name": fn,
                "arguments": h.text_of(msg)}  # fmt: skip
        index = b.add_item(item)
        b.done_item(index)
        self.r.pending[approval_id] = {"recipient": msg.recipient, "server_label": ns, "name": fn}
        return False

    async def resume_approvals(self) -> None:
        """Answer the call an earlier response stopped at, as the client's `mcp_approval_response` decides."""
        r = self.r
        for approval_id, call in list(r.pending.items()):
            r.pending.pop(approval_id)
            decision = r.approvals.get(approval_id)
            last = r.messages[-1] if r.messages else None
            if last is None or last.recipient != call["recipient"]:
                continue
            if decision:
                r.tool_calls += 1
                outcome = await self._mcp(last, call["server_label"], call["name"], None, approval_id)
                r.tool_log.append((call["server_label"], outcome.kind))
                self._answer(call["recipient"], outcome.text, last.channel)
            else:
                self._answer(call["recipient"], "Error: the user did not approve this tool call.", last.channel)


def _shell_output(outcome: ToolOutcome) -> dict[str, Any]:
    """One `shell_call_output` chunk: the server's structured {stdout, stderr, exit_code, timed_out} when it
    sends one, else the text as stdout (exit 0) or, for a failed call, as stderr (exit 1)."""
    s = outcome.structured or {}
    if isinstance(s.get("stdout"), str) or isinstance(s.get("exit_code"), int):
        timed_out = bool(s.get("timed_out"))
        code = s.get("exit_code") if isinstance(s.get("exit_code"), int) else (1 if outcome.is_error else 0)
        return {"stdout": str(s.get("stdout") or ""), "stderr": str(s.get("stderr") or ""),
                "outcome": {"type": "timeout"} if timed_out else {"type": "exit", "exit_code": code}}  # fmt: skip
    if outcome.is_error:
        return {"stdout": "", "stderr": outcome.text, "outcome": {"type": "exit", "exit_code": 1}}
    return {"stdout": outcome.text, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}


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


def cited(page: dict[str, Any], line: int) -> tuple[str, str] | None:
    """(title, url) that a citation of `line` of this page stands for: the page itself, or a search hit."""
    for hit in page.get("hits") or []:
        span = hit.get("lines")
        if isinstance(span, list) and len(span) == 2 and span[0] <= line <= span[1]:
            return hit["title"], hit["url"]
    return (page["title"], page["url"]) if page.get("url") else None


def open_code_item(r: Run) -> int:
    b = r.builder
    index = b.add_item({"id": new_id("ci"), "type": "code_interpreter_call", "code": "", "container_id": r.container_id,
                        "outputs": None, "status": "in_progress"})  # fmt: skip
    b.item_event(index, "response.code_interpreter_call.in_progress")
    return index


def open_mcp_item(r: Run, ns: str, fn: str, approval_id: str | None = None) -> int:
    b = r.builder
    item = {"id": new_id("mcp"), "type": "mcp_call", "server_label": ns, "name": fn, "arguments": "",
            "status": "in_progress", "output": None, "error": None}  # fmt: skip
    if approval_id:
        item["approval_request_id"] = approval_id
    index = b.add_item(item)
    b.item_event(index, "response.mcp_call.in_progress")
    return index
