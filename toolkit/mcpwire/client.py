"""An MCP client of one server, either protocol era, on the kit's pool: the orchestrator's tool calls.

The `mcp` SDK's client spends about 1 ms of CPU per call (its streams, tasks and a pydantic model for each
message), more than the gateway and the tool server together; this one sends a request as one write on a
pooled keep-alive connection and reads its answer as JSON, or as the event of a stream that carries it.

Which era a server speaks is asked once: `server/discover` at 2026-07-28. A server that lists that version is
called sessionless, each request stamped with its `_meta` envelope and the `Mcp-Method` / `Mcp-Name` headers
that mirror the body (and the fleet's session handle as `Mcp-Param-Session-Handle`). Any other answer, a
JSON-RPC error or an HTTP error, means an older server: `initialize` opens a 2025-era session whose
`Mcp-Session-Id` later requests carry, a 404 on one of them (the server forgot the session) re-opens it once
and sends the request again, and `aclose` ends it with a `DELETE`.

A `tools/call` answered `input_required` (2026-07-28) with only a `requestState` is sent again with that
state, backing off, for at most `INPUT_ROUNDS` rounds, as the SDK's client does; one that asks for input
(elicitation, sampling, roots) fails with `InputUnavailable`: this client has no one to ask. A request the
server sends on a stream is answered (`ping`) or refused (anything else), so the server never waits on it.

Given `inline_ms`, a 2026-07-28 client declares the Tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`)
in every request's capabilities, with the fleet's own `inlineWithinMs` setting: a tool server of the fleet makes
a long call a task only when it has not ended within that time (the server decides, per request, as the spec
has it; another server ignores the setting and may answer with a task at once). A call answered with a task
is told to `on_task` (the orchestrator checkpoints the id) and then polled with `tasks/get` at the server's
`pollIntervalMs`, bounded to [`POLL_FLOOR_S`, `POLL_CEILING_S`], until it ends; its result is what a plain
call returns. A 2025-era server never sees the extension.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Awaitable, Callable
from typing import Any

from toolkit.handles import ARGUMENT as HANDLE_ARGUMENT
from toolkit.handles import HEADER_TOKEN
from toolkit.mcpwire.http import Pool, Response, Timeouts
from toolkit.mcpwire.session import HANDSHAKE_VERSION, RpcError, WireError, WireSession

MODERN = "2026-07-28"
CLIENT_INFO = {"name": "toolfleet-orchestrator", "version": "0.1.0"}
INPUT_ROUNDS = 10
"""The most `input_required` rounds a call may take (the SDK's client allows as many)."""
_BACKOFF_S = (0.05, 0.1, 0.2, 0.25)
"""Waits before resending a state-only `input_required` call: doubling from 50 ms to a 250 ms cap."""
_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_META_CLIENT = "io.modelcontextprotocol/clientInfo"
_META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
_META_SERVER = "io.modelcontextprotocol/serverInfo"
_UNSUPPORTED_VERSION = -32022
TASKS = "io.modelcontextprotocol/tasks"
POLL_FLOOR_S = 0.1
POLL_CEILING_S = 5.0
"""The bounds on the wait between two `tasks/get`, whatever `pollIntervalMs` the server suggests."""
TASK_LOST = -32002
"""The gateway's error for a task whose replica is gone."""
_NAMED = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/cancel": "taskId",
}
"""The methods whose `Mcp-Name` header mirrors a body parameter, and that parameter."""
_PLAIN = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")
HANDLE_HEADER = f"mcp-param-{HEADER_TOKEN.lower()}"
"""The header a 2026-07-28 call mirrors the fleet's session handle argument in (its `x-mcp-header` token)."""


class InputUnavailable(Exception):
    """The server needs input this client cannot give, or kept asking past `INPUT_ROUNDS`."""


class TaskLost(Exception):
    """A task this client polls is gone: its replica stopped (-32002), or the server knows no such task
    (unknown, expired, another owner's: one refusal)."""


class TaskEnded(Exception):
    """A task ended without a result: `failed` (its error's message) or `cancelled`."""


OnTask = Callable[[str], Awaitable[object]]
"""Told a call's task id as soon as the server answered with it, before the first poll."""


def header_value(value: str) -> str:
    """`value` as an `Mcp-*` header carries it: verbatim when it is plain visible ASCII without edge spaces,
    else base64 inside the `=?base64?...?=` sentinel (which a plain value that looks like one also gets)."""
    if _PLAIN.fullmatch(value) and not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


class McpClient:
    """The server at `url`: its era negotiated on first use, its requests sent through `pool`.

    `address`: connect to that IP only (what the SSRF policy checked); `stamp`: writes the headers computed
    per request, in the caller's task, into each request's headers (its trace context and request id)."""

    def __init__(
        self,
        pool: Pool,
        url: str,
        headers: dict[str, str],
        *,
        timeouts: Timeouts,
        address: str | None = None,
        stamp: Callable[[dict[str, str]], object] | None = None,
        inline_ms: int | None = None,
    ) -> None:
        async def send(method: str, sent: dict[str, str], body: bytes | None) -> Response:
            if stamp is not None:
                stamp(sent)  # a fresh dict per request (`WireSession.post`)
            return await pool.request(method, url, sent, body, timeouts, address=address)

        self.url = url
        self._wire = WireSession(send, headers)
        self._wire.on_message = self._server_message
        self._opening = asyncio.Lock()
        self.version: str | None = None
        """The protocol version spoken, once negotiated."""
        self.server_name = ""
        self.instructions = ""
        self.inline_ms = inline_ms
        """Declare the Tasks extension, asking a fleet server to answer inline a call that ends this soon."""

    @property
    def modern(self) -> bool:
        return self.version == MODERN

    async def open(self) -> None:
        """Negotiate the era, once (concurrent first calls wait for the one negotiation)."""
        if self.version is not None:
            return
        async with self._opening:
            if self.version is None:
                await self._negotiate()

    async def _negotiate(self) -> None:
        try:
            found = await self._wire.request("server/discover", self._meta({}), self._headers("server/discover", {}))
        except RpcError as exc:
            if exc.code == _UNSUPPORTED_VERSION and not _speaks_handshake(exc.data):
                raise  # a server of later versions only: nothing in common
            found = None
        except WireError:  # an HTTP error without a JSON-RPC body: an older server's answer to an unknown method
            found = None
        if found is not None and MODERN in (found.get("supportedVersions") or ()):
            self._adopt(found, (found.get("_meta") or {}).get(_META_SERVER))
            self.version = MODERN
            return
        result = await self._wire.open(HANDSHAKE_VERSION, CLIENT_INFO)
        self._adopt(result, result.get("serverInfo"))
        self.version = str(result.get("protocolVersion") or HANDSHAKE_VERSION)
        self._wire.headers["mcp-protocol-version"] = self.version  # on every later message, the DELETE too

    def _adopt(self, result: dict[str, Any], info: Any) -> None:
        self.server_name = str(info.get("name", "")) if isinstance(info, dict) else ""
        self.instructions = str(result.get("instructions") or "")

    def _meta(self, params: dict[str, Any], method: str = "") -> dict[str, Any]:
        """`params` with the 2026-07-28 envelope in its `_meta` (a 2025-era session needs none). A `tasks/*`
        request always declares the extension: following or cancelling a task another client started (an
        adopted call) needs no threshold of this one's."""
        if self.version is not None and not self.modern:
            return params
        meta = {**(params.get("_meta") or {}), _META_VERSION: MODERN, _META_CLIENT: CLIENT_INFO}
        capabilities: dict[str, Any] = {}
        if self.inline_ms is not None:
            capabilities = {"extensions": {TASKS: {"inlineWithinMs": self.inline_ms}}}
        elif method.startswith("tasks/"):
            capabilities = {"extensions": {TASKS: {}}}
        return {**params, "_meta": {**meta, _META_CAPABILITIES: capabilities}}

    def _headers(self, method: str, params: dict[str, Any]) -> dict[str, str]:
        """A 2026-07-28 request's headers: the version, and the method, name and handle mirrored (a 2025-era
        session's version header is among its own)."""
        if self.version is not None and not self.modern:
            return {}
        headers = {"mcp-protocol-version": MODERN, "mcp-method": method}
        if (key := _NAMED.get(method)) is not None and isinstance(name := params.get(key), str):
            headers["mcp-name"] = header_value(name)
        handle = (params.get("arguments") or {}).get(HANDLE_ARGUMENT) if method == "tools/call" else None
        if isinstance(handle, str):
            headers[HANDLE_HEADER] = header_value(handle)
        return headers

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request and its result; a 2025-era session the server forgot is re-opened once."""
        await self.open()
        for attempt in range(2):
            sid, rid = self._wire.sid, self._wire.next_id()
            message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": self._meta(params, method)}
            response = await self._wire.post(message, self._headers(method, params))
            try:
                if not (response.status_code == 404 and sid is not None and attempt == 0):
                    return await self._wire.answer(method, response, rid)
            finally:
                await response.aclose()
            await self._reopen(sid)
        raise AssertionError("unreachable")  # the second attempt returns or raises

    async def _reopen(self, sid: str | None) -> None:
        async with self._opening:
            if self._wire.sid == sid:  # not already re-opened by a concurrent request
                await self._wire.open(HANDSHAKE_VERSION, CLIENT_INFO)

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists (all pages)."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(100):
            result = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            tools += [t for t in result.get("tools") or [] if isinstance(t, dict)]
            if not (cursor := result.get("nextCursor")):
                break
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any], on_task: OnTask | None = None) -> dict[str, Any]:
        """The result of `tools/call`, after any state-only `input_required` rounds, or its task's once it ends."""
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        for round_ in range(INPUT_ROUNDS + 1):
            result = await self.request("tools/call", params)
            if result.get("resultType") == "task" and isinstance(task_id := result.get("taskId"), str):
                if on_task is not None:
                    await on_task(task_id)
                return await self.task_result(task_id, result.get("pollIntervalMs"))
            if result.get("resultType") != "input_required":
                return result
            if asked := result.get("inputRequests"):
                kinds = sorted({str(r.get("method")) for r in asked.values() if isinstance(r, dict)})
                raise InputUnavailable(f"the tool asked for input no one here can give: {', '.join(kinds) or '?'}")
            await asyncio.sleep(_BACKOFF_S[min(round_, len(_BACKOFF_S) - 1)])
            params = {"name": name, "arguments": arguments, "requestState": result.get("requestState")}
        raise InputUnavailable(f"the tool still needed input after {INPUT_ROUNDS} rounds")

    async def task_result(self, task_id: str, poll_ms: Any = None) -> dict[str, Any]:
        """The result of the task `task_id`, polled until it ends (also a task another client started, for
        the same owner: an adopted call); `TaskLost` when the server no longer has it, `TaskEnded` when it
        failed or was cancelled."""
        while True:
            await asyncio.sleep(_poll_s(poll_ms))
            try:
                task = await self.request("tasks/get", {"taskId": task_id})
            except RpcError as exc:
                if exc.code in (TASK_LOST, -32602):  # lost with its replica; unknown, expired or not ours
                    raise TaskLost(f"task {task_id}: {exc.message}") from None
                raise
            poll_ms, status = task.get("pollIntervalMs", poll_ms), task.get("status")
            if status == "completed" and isinstance(result := task.get("result"), dict):
                return result
            if status in ("failed", "cancelled"):
                raise TaskEnded(f"its task {status}: {(task.get('error') or {}).get('message', 'no reason given')}")
            if status == "input_required":
                raise InputUnavailable("the tool's task asked for input no one here can give")

    async def cancel_task(self, task_id: str) -> None:
        """Ask the server to cancel the task (its work stops; a task already ended or gone is left as it is)."""
        await self.request("tasks/cancel", {"taskId": task_id})

    async def _server_message(self, message: dict[str, Any]) -> None:
        """A message on a stream before its answer: a request of the server's is answered, a notification
        (progress, logging) needs nothing."""
        if "method" not in message or "id" not in message or self.modern:  # 2026-07-28 asks by `input_required`
            return
        headers = self._headers(str(message["method"]), {})
        if message["method"] == "ping":
            await self._wire.reply({"id": message["id"], "result": {}}, headers)
            return
        error = {"code": -32601, "message": f"this client does not serve {message['method']!r}"}
        await self._wire.reply({"id": message["id"], "error": error}, headers)

    async def aclose(self) -> None:
        """End a 2025-era session (`DELETE`); a sessionless client has nothing to end."""
        await self._wire.close()


def _poll_s(poll_ms: Any) -> float:
    """The wait before the next `tasks/get`: the server's suggestion, kept within the bounds."""
    wanted = poll_ms / 1000 if isinstance(poll_ms, int | float) and not isinstance(poll_ms, bool) else POLL_FLOOR_S
    return min(max(wanted, POLL_FLOOR_S), POLL_CEILING_S)


def _speaks_handshake(data: Any) -> bool:
    """Whether an unsupported-version error's `supported` list names a handshake-era version."""
    supported = data.get("supported") if isinstance(data, dict) else None
    return not isinstance(supported, list) or any(isinstance(v, str) and v < MODERN for v in supported)
