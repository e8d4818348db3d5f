"""The sandbox sessions of every replica of every namespace, for the operator console (`GET /admin/sessions`),
and an operator's end of one (`POST /admin/sessions/end`), through each tool server's own `/admin` routes
(`toolkit.admin`) with the fleet's admin token.

A replica that does not answer is reported in its own entry (`error`), beside the others' sessions, so one
replica gone never breaks the listing. The end is sent only to a replica the gateway holds for that namespace:
an operator's form never names an arbitrary URL for the gateway to call.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import anyio
from pydantic import BaseModel, ConfigDict, Field

from gateway.errors import BadUpstream, GatewayError, InvalidParams, UnknownNamespace
from gateway.routing import Namespace
from gateway.service import Gateway
from gateway.upstream import Replica, upstream_errors
from toolkit.mcpwire.http import Timeouts
from toolkit.wire import admin_token

ADMIN_TIMEOUTS = Timeouts(connect=2.0, read=5.0)
MAX_PER_REPLICA = 20_000
"""Sessions read from one replica at most (pages of `toolkit.admin.MAX_PAGE`); more are counted, not listed."""


class EndSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: str = Field(min_length=1, max_length=64)
    replica: str = Field(min_length=1, max_length=2048, description="the replica's URL as /admin/status lists it")
    session: str = Field(min_length=1, max_length=300)


def admin_url(replica: Replica, path: str) -> str:
    """The tool server's `/admin` route on the same origin as the replica's MCP URL."""
    parts = urlsplit(replica.url)
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


async def _exchange(gw: Gateway, replica: Replica, method: str, path: str, body: bytes | None = None) -> Any:
    """One admin request to a replica, answered as JSON; a failure is a `GatewayError` saying what it answered."""
    headers = {"authorization": f"Bearer {admin_token()}", "content-type": "application/json"}
    with upstream_errors(replica, passive=False):
        answer = await gw.client.request(method, admin_url(replica, path), headers, body, ADMIN_TIMEOUTS)
        raw = await answer.aread(16 * 1024 * 1024)
    if answer.status_code == 404:
        raise BadUpstream(f"it lists no sessions ({method} {path} is HTTP 404): not a toolfleet tool server, or older")
    if answer.status_code != 200:
        raise BadUpstream(f"it answered {method} {path} with HTTP {answer.status_code}")
    return json.loads(raw)


async def _replica_sessions(gw: Gateway, replica: Replica) -> dict[str, Any]:
    """Every session one replica holds, page after page, or the reason it could not be read."""
    sessions: list[dict[str, Any]] = []
    after: str | None = ""
    page: dict[str, Any] = {}
    try:
        while after is not None and len(sessions) < MAX_PER_REPLICA:
            path = "/admin/sessions" + (f"?after={quote(after, safe='')}" if after else "")
            page = await _exchange(gw, replica, "GET", path)
            sessions.extend(page["sessions"])
            after = page["next"]
    except (GatewayError, ValueError, KeyError, TypeError) as exc:
        return {"error": f"could not be read: {exc}"}
    return {"sessions": sessions, "total": page.get("total", len(sessions)), "snapshots": page.get("snapshots")}


async def listing(gw: Gateway) -> dict[str, dict[str, Any]]:
    """Per namespace, per replica URL: its sessions (or its `error`), every replica read at once."""
    found: dict[str, dict[str, Any]] = {name: {} for name in gw.namespaces}

    async def read(name: str, replica: Replica) -> None:
        found[name][replica.url] = await _replica_sessions(gw, replica)

    async with anyio.create_task_group() as group:
        for name, ns in gw.namespaces.items():
            for replica in list(ns.replicas.values()):
                group.start_soon(read, name, replica)
    return found


def _held(ns: Namespace | None, asked: EndSession) -> Replica:
    if ns is None:
        raise UnknownNamespace(f"unknown namespace {asked.namespace!r}")
    if (replica := ns.replicas.get(asked.replica)) is None:
        raise InvalidParams(f"{asked.replica!r} is not a replica of {asked.namespace!r} (it may have gone)")
    return replica


async def end(gw: Gateway, body: bytes) -> dict[str, Any]:
    """End one session on the replica named: `{"session": KEY, "ended": bool}` as the replica answers."""
    try:
        asked = EndSession.model_validate_json(body)
    except ValueError as exc:
        raise InvalidParams(f"the body must be {{namespace, replica, session}}: {exc}") from exc
    replica = _held(gw.namespaces.get(asked.namespace), asked)
    answer: dict[str, Any] = await _exchange(
        gw, replica, "POST", "/admin/sessions/end", json.dumps({"session": asked.session}).encode()
    )
    return answer
