"""JSON-RPC messages on the wire: validate what clients send, rewrite the little the gateway changes.

The gateway relays messages byte for byte except: `serverInfo.name` (in `initialize` and
`server/discover` results, and in a result's `_meta` serverInfo) becomes the namespace, and a
`tools/list` result loses tools whose definitions wait for approval (every other field of the
result, `ttlMs` and `cacheScope` included, is kept); on legacy SSE a `tools/list` result shows no
session-handle argument, as a tool server's own `/sse` does (vLLM reads it into the prompt). A
`tools/call` that asked for a new session handle is read for the handle it was answered, and an
`input_required` answer for its `requestState`: the gateway pins either to the replica that answered.
A 2026-07-28 listing that differs with the caller's transport (the legacy SSE one) is marked
`cacheScope: private` whatever the upstream said, so no shared cache hands it to a streamable-HTTP client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.shared.inbound import NAME_BEARING_METHODS, encode_header_value
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS

from gateway.errors import InvalidParams, InvalidRequest, ParseError
from toolkit import strictjson
from toolkit.handles import without_argument

META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
SAFE_METHODS = frozenset(
    {
        "initialize",
        "server/discover",
        "ping",
        "tools/list",
        "resources/list",
        "resources/templates/list",
        "prompts/list",
    }
)
"""Methods without side effects: the only ones the gateway retries on another replica."""


MAX_DEPTH = 64
"""How deep a client message may nest objects and arrays. A request nested deeper is refused as a parse error
(-32700) naming the limit, before its replica or any JSON walker here recurses into it."""
METHOD = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z/]{1,256}")
"""A JSON-RPC method the gateway relays: an RFC 9110 token, with `/` (MCP's `tools/call`), at most 256 long.
Legacy SSE copies it into the upstream's `Mcp-Method` header, so it is checked here, for every transport."""
_LONE_SURROGATE = "a string holds an unpaired surrogate (\\uD800-\\uDFFF)"
_SUSPECT = re.compile(rb"\\u[dD][89a-fA-F]")
"""A `\\uD800`-`\\uDFFF` escape: a surrogate, which only a correct pair of them makes valid text."""


def parse_message(body: bytes) -> dict[str, Any]:
    """One client JSON-RPC message; batches and malformed messages are refused precisely."""
    try:
        msg = strictjson.loads(body)
    except strictjson.NotJson as exc:
        raise ParseError(f"request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise ParseError(f"request body nests deeper than {MAX_DEPTH} levels") from exc
    if isinstance(msg, dict | list) and (body.count(b"[") + body.count(b"{") > MAX_DEPTH or _SUSPECT.search(body)):
        _check_tree(msg)
    if isinstance(msg, list):
        raise InvalidRequest("JSON-RPC batches are not supported")
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        raise InvalidRequest('not a JSON-RPC 2.0 message (expected an object with "jsonrpc": "2.0")')
    method = msg.get("method")
    if method is None:
        if "id" not in msg or ("result" not in msg and "error" not in msg):
            raise InvalidRequest("a message without a method must be a response with an id and a result or error")
    elif not isinstance(method, str) or not METHOD.fullmatch(method):
        raise InvalidRequest('"method" must be a string of 1-256 RFC 9110 token characters or "/"')
    rid = msg.get("id")
    if rid is not None and (not isinstance(rid, (str, int)) or isinstance(rid, bool)):
        raise InvalidRequest('"id" must be a string or an integer')
    params = msg.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        raise InvalidRequest('"params" must be an object')
    return msg


def _check_tree(msg: Any) -> None:
    """Refuse a message nested deeper than `MAX_DEPTH` or holding a lone surrogate (text no UTF-8 can carry, so
    neither the upstream request nor a log line could be written): a walk without recursion, run only for bodies
    whose bytes say they might be either."""
    stack: list[tuple[Any, int]] = [(msg, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ParseError(f"request body nests deeper than {MAX_DEPTH} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            for text in (key, value):
                if isinstance(text, str) and not _utf8(text):
                    raise ParseError(f"request body is not valid JSON: {_LONE_SURROGATE}")
            if isinstance(value, dict | list):
                stack.append((value, depth + 1))


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def protocol_version(msg: dict[str, Any]) -> str | None:
    """The protocol version a 2026-era request names in its `_meta` envelope (None: an older era's request)."""
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def envelope_headers(msg: dict[str, Any]) -> dict[str, str]:
    """The routing headers a 2026-era request carries on streamable HTTP, derived from its `_meta` envelope.

    Legacy SSE has no such headers, so a bridged modern request gets them here; the upstream checks
    that they agree with the body.
    """
    version, method = protocol_version(msg), msg.get("method")
    if version is None or not isinstance(method, str):
        return {}
    if version not in KNOWN_PROTOCOL_VERSIONS:
        raise InvalidParams(f'params._meta["{PROTOCOL_VERSION_META_KEY}"] is not a known protocol version: {version!r}')
    headers = {"mcp-protocol-version": version, "mcp-method": method}  # `parse_message` checked the method
    key = NAME_BEARING_METHODS.get(method)
    if key is not None and isinstance(value := msg["params"].get(key), str):  # a version: params is a dict
        headers["mcp-name"] = encode_header_value(value)
    return headers


def tool_name(msg: dict[str, Any]) -> str | None:
    params = msg.get("params")
    return params.get("name") if msg.get("method") == "tools/call" and isinstance(params, dict) else None


ToolsReview = Callable[[list[Any]], Awaitable[list[Any]]]


class Rewriter:
    """Rewrites the upstream's messages for one client request (`method` is the request's method)."""

    def __init__(
        self,
        namespace: str,
        method: str | None,
        review: ToolsReview | None = None,
        *,
        minting: bool = False,
        legacy: bool = False,
    ) -> None:
        self.namespace = namespace
        self.method = method
        self._review = review
        self._minting = minting
        self._legacy = legacy
        self.seen: dict[str, Any] | None = None
        """The rewritten result of the request, when it carried a serverInfo or a tool list."""
        self.minted: str | None = None
        """The session handle a call that asked for one (`minting`) was answered."""
        self.asked: str | None = None
        """The `requestState` of an `input_required` answer: its retry must reach the same replica."""

    def needs_parse(self, data: bytes) -> bool:
        return (
            b"serverInfo" in data
            or (self.method == "tools/list" and b'"tools"' in data)
            or (self._minting and b'"session_handle"' in data)
            or b'"input_required"' in data
        )

    async def apply(self, data: bytes) -> tuple[bytes, Any]:
        """The bytes to relay for one upstream message, and the message parsed (None when not JSON)."""
        try:
            msg = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, too deep, or an integer past 4300 digits
            return data, None
        if not self.needs_parse(data):
            return data, msg
        result = msg.get("result") if isinstance(msg, dict) else None
        if not isinstance(result, dict):
            return data, msg
        if result.get("resultType") == "input_required":
            self.asked = result.get("requestState") if isinstance(result.get("requestState"), str) else None
            return data, msg
        if self._minting and isinstance(structured := result.get("structuredContent"), dict):
            handle = structured.get("session_handle")
            self.minted = handle if isinstance(handle, str) else None
            return data, msg
        info = result.get("serverInfo")
        if isinstance(info, dict):
            info["name"] = self.namespace
        meta = result.get("_meta")
        if isinstance(meta, dict) and isinstance(meta.get(META_SERVER_INFO), dict):
            meta[META_SERVER_INFO]["name"] = self.namespace
        if self.method == "tools/list" and isinstance(result.get("tools"), list) and self._review is not None:
            result["tools"] = await self._review(result["tools"])
        self.seen = result
        if self._legacy and self.method == "tools/list":
            msg = {**msg, "result": legacy_listing(result)}
        return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode(), msg


def legacy_listing(result: dict[str, Any]) -> dict[str, Any]:
    """A `tools/list` result as the legacy SSE transport shows it: without the session-handle argument,
    as a tool server shows it on its own `/sse` (vLLM's `--tool-server` reads it into the model's prompt;
    an SSE connection is a session and needs no handle). Its content depends on the transport, so a result
    that carries a cache scope (2026-07-28) is private; `ttlMs` and the other fields are kept."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return result
    shown = [
        {**t, "inputSchema": without_argument(t["inputSchema"])} if isinstance(t.get("inputSchema"), dict) else t
        for t in tools
        if isinstance(t, dict)
    ]
    scope = {"cacheScope": "private"} if "cacheScope" in result else {}
    return {**result, "tools": shown, **scope}
