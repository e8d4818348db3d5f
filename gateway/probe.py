"""A minimal MCP client the gateway uses itself: health probes, discovery refresh and idle cleanup.

The session itself is the kit's (`toolkit.mcpwire.session`), sent through `open_stream` so that its requests
count toward the replica's health; what the kit says of an answer becomes a `BadUpstream` here, where it enters.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from gateway.errors import BadUpstream
from gateway.upstream import Replica, open_stream
from toolkit.mcpwire.http import Pool, Response, Timeouts
from toolkit.mcpwire.session import HANDSHAKE_VERSION, RpcError, WireError, WireSession
from toolkit.mcpwire.sse import SseOverflow

PROBE_VERSION = HANDSHAKE_VERSION
CLIENT_INFO = {"name": "toolfleet-gateway", "version": "0.1.0"}


@contextlib.contextmanager
def _bad_upstream() -> Iterator[None]:
    try:
        yield
    except RpcError as exc:
        raise BadUpstream(f"{exc.method} failed upstream: {exc.message}") from exc
    except (WireError, SseOverflow) as exc:
        raise BadUpstream(str(exc)) from exc


class ProbeSession(WireSession):
    """One upstream MCP session opened by the gateway (initialize handshake, then requests)."""

    def __init__(
        self, client: Pool, replica: Replica, headers: dict[str, str], timeout_s: float, *, passive: bool = True
    ) -> None:
        timeouts = Timeouts(connect=timeout_s, read=timeout_s)

        async def send(method: str, sent: dict[str, str], body: bytes | None) -> Response:
            # `passive`: its requests count toward the replica's health one by one; a health probe judges once
            return await open_stream(client, replica, method, sent, body, http_timeout=timeouts, passive=passive)

        super().__init__(send, headers)
        self.replica = replica

    async def request(
        self, method: str, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        with _bad_upstream():
            return await super().request(method, params, headers)

    async def open(self, version: str = PROBE_VERSION, client_info: dict[str, str] = CLIENT_INFO) -> dict[str, Any]:
        return await super().open(version, client_info)
