"""Session handles: state across calls for clients that carry no session (MCP 2026-07-28, SEP-2567).

The 2026-07-28 revision has no `Mcp-Session-Id`, so a client that wants a tool's state to outlive one
call asks for a handle (`session_handle: "new"`) and passes it back in later calls. A handle is minted
by the server that holds the state and signed with a key that only that server process knows, so a
handle can be checked without a lookup: a forged one, one minted for another namespace, and one whose
session merely ended are told apart and each gets its own clear error. The handle argument is declared
with the spec's `x-mcp-header` annotation, so a 2026-07-28 client also sends it as the
`Mcp-Param-Session-Handle` header, which is what the gateway routes on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from toolkit.wire import fleet_key

ARGUMENT = "session_handle"
"""The tool argument that carries a handle."""
HEADER_TOKEN = "Session-Handle"
"""Its `x-mcp-header` token: 2026-07-28 clients send the handle as `Mcp-Param-Session-Handle`."""
NEW = "new"
"""The argument value that asks for a fresh handle."""


def without_argument(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's input schema as legacy SSE shows it (what vLLM's `--tool-server` puts in the model's prompt):
    without the handle argument, so the model reads the shapes it was trained on (an SSE connection is a
    session and needs no handle)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or ARGUMENT not in properties:
        return schema
    return {**schema, "properties": {k: v for k, v in properties.items() if k != ARGUMENT}}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def misdirected(handle: str, namespace: str) -> str | None:
    """Why `handle` cannot be one of `namespace`'s, from its shape alone (so the gateway, which holds no
    secret, says the same as the tool server); None: it may be."""
    owner, _, _ = handle.partition(".")
    if handle.count(".") != 2 or not all(handle.split(".")):
        return f"{handle[:80]!r} is not a session handle: pass one a call answered, or {NEW!r}"
    if owner != namespace:
        return (
            f"session handle {handle!r} belongs to the {owner!r} tools, not {namespace!r}: "
            f"pass {NEW!r} for a handle of this tool"
        )
    return None


class BadHandle(ToolError):
    """A handle this server cannot use: malformed, forged, another namespace's, or no longer held."""


class Handles:
    """Mints and checks the handles of one namespace, alike on every replica of the fleet."""

    def __init__(self, namespace: str, secret: bytes | None = None) -> None:
        self.namespace = namespace
        self._secret = secret or fleet_key("handles")

    def _mac(self, namespace: str, nonce: str) -> str:
        digest = hmac.new(self._secret, f"{namespace}.{nonce}".encode(), hashlib.sha256).digest()
        return _b64(digest[:18])

    def mint(self) -> str:
        nonce = _b64(secrets.token_bytes(18))
        return f"{self.namespace}.{nonce}.{self._mac(self.namespace, nonce)}"

    def owns(self, handle: str) -> bool:
        """Whether this fleet minted `handle` (a constant-time check of its signature)."""
        namespace, _, rest = handle.partition(".")
        nonce, _, mac = rest.partition(".")
        return namespace == self.namespace and hmac.compare_digest(mac, self._mac(namespace, nonce))

    def check(self, handle: str) -> None:
        """Refuse a handle this server did not mint, naming why."""
        if (why := misdirected(handle, self.namespace)) is not None:
            raise BadHandle(why)
        if not self.owns(handle):
            raise BadHandle(
                f"session handle {handle!r} was not issued by this fleet (mistyped, forged, or signed with "
                f"another fleet secret): pass {NEW!r} to start a new session"
            )
