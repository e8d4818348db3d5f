"""Responses API input items mapped to Harmony messages (output items map the other way in `turns`)."""

from __future__ import annotations

import base64
import binascii
import json
import shlex
import zlib
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.events import new_id
from orchestrator.schema import RequestError


def normalize(input_: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input as a list of items with ids, as `GET /v1/responses/{id}/input_items` lists them."""
    items = [{"type": "message", "role": "user", "content": input_}] if isinstance(input_, str) else input_
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestError("each input item must be an object", f"input[{i}]")
        item = dict(item)
        if "type" not in item and "role" in item:
            item["type"] = "message"
        if item.get("type") == "message" and isinstance(item.get("content"), str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": kind, "text": item["content"]}]
        item.setdefault("id", new_id({"message": "msg"}.get(item.get("type", ""), "item")))
        out.append(item)
    return out


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError("message content must be a string or a list of parts", where)
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text", "reasoning_text"):
            parts.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") == "refusal":
            parts.append(str(part.get("refusal", "")))
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise RequestError(f"content part type {kind!r} is not supported by this model", where)
    return "".join(parts)


_SEAL = "tfr1."


def seal_reasoning(text: str) -> str:
    """`reasoning.encrypted_content`: the reasoning text, compressed and encoded so a stateless client
    (store=false) can send it back. Not encrypted: gpt-oss reasoning is returned in clear anyway."""
    return _SEAL + base64.urlsafe_b64encode(zlib.compress(text.encode())).decode()


def open_reasoning(value: str, where: str) -> str:
    if not value.startswith(_SEAL):
        raise RequestError("encrypted_content was not produced by this server", where)
    try:
        return zlib.decompress(base64.urlsafe_b64decode(value[len(_SEAL) :])).decode()
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
        raise RequestError("encrypted_content is corrupt", where) from None


_MCP_HTTP_CODES = {"unavailable": 503, "timeout": 504}
_MCP_PROTOCOL_CODES = {"rejected": -32602}  # JSON-RPC invalid params: bad arguments or a tool not allowed


def mcp_error(kind: str, text: str) -> dict[str, Any]:
    """The structured `error` of a failed mcp_call (OpenAI's McpToolCallError union), chosen by the outcome's
    kind: the tool's own error result, the server out of reach or too slow (HTTP), or a protocol refusal."""
    if kind == "tool_error":
        return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": text}]}
    if kind in _MCP_HTTP_CODES:
        return {"type": "http_error", "code": _MCP_HTTP_CODES[kind], "message": text}
    return {"type": "mcp_protocol_error", "code": _MCP_PROTOCOL_CODES.get(kind, -32603), "message": text}


def mcp_error_text(error: Any) -> str:
    """What the model reads back for an mcp_call's error: a client may echo the structured object or a string."""
    if not isinstance(error, dict):
        return str(error or "")
    if isinstance(error.get("message"), str):
        return error["message"]
    content = error.get("content")
    parts = content if isinstance(content, list) else [content]
    return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in parts if p is not None)


def web_search_text(item: dict[str, Any], results: dict[str, str]) -> str:
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


_WEB_ACTIONS = {"search": "search", "open_page": "open", "find": "find", "find_in_page": "find"}


def to_messages(
    items: list[dict[str, Any]], calls: dict[str, str], results: dict[str, str] | None = None
) -> list[Message]:
    """Input items as Harmony messages; `calls` maps function call ids to names (updated in place);
    `results` holds the kept tool text of earlier web_search_call items by item id."""
    out: list[Message] = []
    for i, item in enumerate(items):
        where, kind = f"input[{i}]", item.get("type")
        if kind == "message":
            role, text = item.get("role"), _text(item.get("content"), f"{where}.content")
            if role == "user":
                out.append(h.user(text))
            elif role == "assistant":
                out.append(h.assistant(text, "final"))
            elif role in ("system", "developer"):
                out.append(Message.from_role_and_content(h.Role.DEVELOPER, text))
            else:
                raise RequestError(f"unknown message role {role!r}", f"{where}.role")
        elif kind == "reasoning":
            text = _text(item.get("content") or [], f"{where}.content")
            if not text and isinstance(item.get("encrypted_content"), str):
                text = open_reasoning(item["encrypted_content"], f"{where}.encrypted_content")
            text = text or "".join(s.get("text", "") for s in item.get("summary") or [])
            out.append(h.assistant(text, "analysis"))
        elif kind == "function_call":
            name, call_id = item.get("name"), item.get("call_id")
            if not name or not call_id:
                raise RequestError("function_call items need name and call_id", where)
            calls[call_id] = name
            out.append(h.assistant(str(item.get("arguments", "")), "commentary", f"functions.{name}", "json"))
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in calls:
                raise RequestError(
                    f"no function call with call_id {call_id!r} in this conversation", f"{where}.call_id"
                )
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            out.append(h.tool_result(f"functions.{calls[call_id]}", text))
        elif kind == "web_search_call":
            action = item.get("action") or {}
            fn = _WEB_ACTIONS.get(action.get("type"), "search")
            args = {k: v for k, v in action.items() if k in ("query", "pattern") or (k == "url" and fn == "open")}
            if "url" in args:
                args["id"] = args.pop("url")
            out.append(h.assistant(json.dumps(args), "analysis", f"browser.{fn}", "json"))
            out.append(h.tool_result(f"browser.{fn}", web_search_text(item, results or {}), "analysis"))
        elif kind == "code_interpreter_call":
            out.append(h.assistant(str(item.get("code") or ""), "analysis", "python"))
            logs = "".join(o.get("logs", "") for o in item.get("outputs") or [] if o.get("type") == "logs")
            out.append(h.tool_result("python", logs, "analysis"))
        elif kind == "mcp_call":
            name = f"{item.get('server_label')}.{item.get('name')}"
            out.append(h.assistant(str(item.get("arguments") or "{}"), "commentary", name, "json"))
            out.append(h.tool_result(name, str(item.get("output") or mcp_error_text(item.get("error")) or "")))
        elif kind == "shell_call":
            commands = (item.get("action") or {}).get("commands") or []
            if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
                raise RequestError("shell_call items need action.commands, a list of strings", where)
            for command in commands:  # exec form, as the model wrote it: {"cmd": [...]}
                try:
                    cmd = shlex.split(command)
                except ValueError:
                    cmd = ["bash", "-lc", command]
                out.append(h.assistant(json.dumps({"cmd": cmd}), "commentary", "container.exec", "json"))
        elif kind == "shell_call_output":
            chunks = item.get("output") or []
            text = "".join(
                str(c.get("stdout") or "") + str(c.get("stderr") or "") for c in chunks if isinstance(c, dict)
            )
            out.append(h.tool_result("container.exec", text))
        elif kind in ("mcp_list_tools", "mcp_approval_request", "mcp_approval_response"):
            continue  # handled by the turn loop (approvals) or informational only
        else:
            raise RequestError(f"unsupported input item type {kind!r}", f"{where}.type")
    return out
