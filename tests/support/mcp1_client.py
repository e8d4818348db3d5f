"""A scriptable MCP client on the MCP 1.x Python SDK; run it with the python of `.cache/mcp1-venv`.

    python mcp1_client.py --url http://127.0.0.1:8800/browser/mcp [--transport streamable-http|sse]
        [--header k=v]... [--timeout S] [--ops JSON | --ops @file]     (without --ops: JSON on stdin)

Operations, a JSON list, run in order in one MCP session; each item is an object or a short list:
    {"op": "list_tools"}                                       ["list_tools"]
    {"op": "call_tool", "name": "add", "arguments": {...}}     ["call_tool", "add", {...}]
    {"op": "list_resources"}, {"op": "read_resource", "uri": "..."},
    {"op": "list_prompts"}, {"op": "get_prompt", "name": "...", "arguments": {...}}, {"op": "ping"}

Prints one JSON object on stdout:
    {"server_info": {"name", "version", ...}, "protocol_version", "instructions", "capabilities",
     "session_id" (streamable HTTP only), "results": [one per operation]}
Each result has "op" and "ok"; on success the SDK's result dumped as JSON (camelCase field names):
list_tools -> "tools" (all pages), call_tool -> "result" ({"content": [...], "isError", ...}) plus
"progress" (progress notifications seen) and "logs" (log messages seen); on failure "error"
({"type", "message", "code"?}) and the next operation still runs. A failure to connect or
initialize prints {"error": {...}, "results": []} and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from datetime import timedelta
from typing import Any

import anyio
from mcp import ClientSession, McpError
from mcp.client.sse import sse_client

try:
    from mcp.client.streamable_http import streamablehttp_client
except ImportError:  # pragma: no cover - very old 1.x
    streamablehttp_client = None  # type: ignore[assignment]


def _dump(obj: Any) -> Any:
    return obj.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(obj, "model_dump") else obj


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _error(exc: BaseException) -> dict[str, Any]:
    exc = _leaf(exc)
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, McpError):
        out["code"] = exc.error.code
        if exc.error.data is not None:
            out["data"] = exc.error.data
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None:
        out["status_code"] = status
    return out


def _normalise(op: Any) -> dict[str, Any]:
    if isinstance(op, str):
        return {"op": op}
    if isinstance(op, list):
        name, *rest = op
        if name == "call_tool":
            return {"op": name, "name": rest[0], "arguments": rest[1] if len(rest) > 1 else {}}
        if name == "read_resource":
            return {"op": name, "uri": rest[0]}
        if name == "get_prompt":
            return {"op": name, "name": rest[0], "arguments": rest[1] if len(rest) > 1 else None}
        return {"op": name}
    if isinstance(op, dict) and "op" in op:
        return op
    raise ValueError(f"bad operation {op!r}")


async def _run_op(session: ClientSession, op: dict[str, Any], logs: list[Any], read_timeout: float) -> dict[str, Any]:
    kind = op["op"]
    out: dict[str, Any] = {"op": kind, "ok": True}
    if kind == "list_tools":
        tools: list[Any] = []
        cursor = None
        while True:
            page = await session.list_tools(cursor=cursor) if cursor else await session.list_tools()
            tools += [_dump(t) for t in page.tools]
            cursor = page.nextCursor
            if not cursor:
                break
        out["tools"] = tools
    elif kind == "call_tool":
        progress: list[dict[str, Any]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append({"progress": value, "total": total, "message": message})

        logs.clear()
        out["name"] = op["name"]
        result = await session.call_tool(
            op["name"],
            op.get("arguments") or {},
            read_timeout_seconds=timedelta(seconds=read_timeout),
            progress_callback=on_progress,
        )
        out["result"] = _dump(result)
        out["progress"] = progress
        out["logs"] = list(logs)
    elif kind == "list_resources":
        out["resources"] = [_dump(r) for r in (await session.list_resources()).resources]
    elif kind == "read_resource":
        out["result"] = _dump(await session.read_resource(op["uri"]))
    elif kind == "list_prompts":
        out["prompts"] = [_dump(p) for p in (await session.list_prompts()).prompts]
    elif kind == "get_prompt":
        out["result"] = _dump(await session.get_prompt(op["name"], op.get("arguments")))
    elif kind == "ping":
        await session.send_ping()
    else:
        raise ValueError(f"unknown operation {kind!r}")
    return out


async def run(url: str, transport: str, headers: dict[str, str], ops: list[Any], read_timeout: float) -> dict[str, Any]:
    output: dict[str, Any] = {"results": []}
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(_dump(params))

    async def drive(read: Any, write: Any, get_session_id: Any = None) -> None:
        async with ClientSession(
            read, write, read_timeout_seconds=timedelta(seconds=read_timeout), logging_callback=on_log
        ) as session:
            init = await session.initialize()
            output["server_info"] = _dump(init.serverInfo)
            output["protocol_version"] = init.protocolVersion
            output["instructions"] = init.instructions
            output["capabilities"] = _dump(init.capabilities)
            if get_session_id is not None:
                output["session_id"] = get_session_id()
            for raw in ops:
                try:
                    op = _normalise(raw)
                    output["results"].append(await _run_op(session, op, logs, read_timeout))
                except Exception as exc:
                    output["results"].append({"op": str(raw), "ok": False, "error": _error(exc)})

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if transport == "sse":
            client = sse_client(url, headers=headers or None, timeout=read_timeout, sse_read_timeout=read_timeout)
            async with client as (r, w):
                await drive(r, w)
        else:
            if streamablehttp_client is None:
                raise RuntimeError("this mcp 1.x has no streamable HTTP client")
            async with streamablehttp_client(
                url, headers=headers or None, timeout=read_timeout, sse_read_timeout=read_timeout
            ) as (r, w, get_sid):
                await drive(r, w, get_sid)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--transport", choices=["sse", "streamable-http"], default="streamable-http")
    parser.add_argument("--header", action="append", default=[], metavar="K=V")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--ops", help="JSON list of operations, or @file; default: read from stdin")
    args = parser.parse_args(argv)

    headers: dict[str, str] = {}
    for item in args.header:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--header wants k=v, got {item!r}")
        headers[key.strip()] = value
    if args.ops is None:
        raw = sys.stdin.read()
    elif args.ops.startswith("@"):
        with open(args.ops[1:]) as fh:
            raw = fh.read()
    else:
        raw = args.ops
    ops = json.loads(raw) if raw.strip() else []
    if not isinstance(ops, list):
        parser.error("operations must be a JSON list")

    async def bounded() -> dict[str, Any]:
        with anyio.fail_after(args.timeout * (len(ops) + 2)):
            return await run(args.url, args.transport, headers, ops, args.timeout)

    try:
        output = anyio.run(bounded)
    except BaseException as exc:  # connection or initialize failure: report it as JSON
        if isinstance(exc, KeyboardInterrupt):
            raise
        print(json.dumps({"error": _error(exc), "results": []}))
        return 1
    print(json.dumps(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
