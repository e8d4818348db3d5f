"""The gateway's admin API as the console reads and acts through it (`GET /admin/status`, `GET /admin/tools`,
`POST /admin/tools/{ns}/approve` and `reject`, `GET /admin/sessions`, `POST /admin/sessions/end`). A gateway
that cannot be reached or answers an error is a `GatewayDown` whose message the page shows in place of the data,
so a page never breaks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from toolkit.wire import admin_token

TIMEOUT_S = 5.0


def _said(answer: httpx.Response) -> str | None:
    """The gateway's own words for a refusal (its JSON-RPC error's message), where it gave some."""
    try:
        message = answer.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return None
    return str(message)


class GatewayDown(Exception):
    """The gateway did not answer its admin API: the message says which URL and why."""


class GatewayAdmin:
    """A client of one gateway's admin API; `url` None: this orchestrator runs without a gateway."""

    def __init__(self, url: str | None, token: str | None) -> None:
        self.url = url.rstrip("/") if url else None
        # no token of its own: the fleet's, which every gateway of this fleet accepts on /admin
        self._headers = {"authorization": f"Bearer {token or admin_token()}"}
        self._http: httpx.AsyncClient | None = None  # one per app run (`running`): a new one costs ~40 ms of TLS setup

    @contextlib.asynccontextmanager
    async def running(self, app: object) -> AsyncIterator[None]:
        """The router's lifespan: the client opened with the app and closed with it."""
        async with httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False) as self._http:
            yield
        self._http = None

    async def _call(self, method: str, path: str, body: dict[str, str] | None = None) -> Any:
        if self.url is None:
            raise GatewayDown("this orchestrator runs without a gateway (--tools-url '')")
        if self._http is None:
            raise GatewayDown("the console is not running (the app has not started or is stopping)")
        try:
            answer = await self._http.request(method, self.url + path, headers=self._headers, json=body)
        except httpx.HTTPError as exc:
            raise GatewayDown(f"the gateway at {self.url} could not be reached: {type(exc).__name__}") from exc
        if answer.status_code != 200:
            said = f" ({why})" if (why := _said(answer)) else ""
            raise GatewayDown(
                f"the gateway at {self.url} answered {method} {path} with HTTP {answer.status_code}{said}"
            )
        return answer.json()

    async def status(self) -> dict[str, Any]:
        """Readiness and, per namespace, every replica's URL and state and the tools pending approval."""
        body: dict[str, Any] = await self._call("GET", "/admin/status")
        return body

    async def tools(self) -> dict[str, Any]:
        """Per namespace, the approved, pending and rejected definitions' hashes by tool name, and each pending
        tool's approved and pending text."""
        body: dict[str, Any] = await self._call("GET", "/admin/tools")
        return body

    async def decide(self, namespace: str, decision: str) -> list[str]:
        """Approve or reject (`decision`) a namespace's pending definitions; the tools decided."""
        body = await self._call("POST", f"/admin/tools/{namespace}/{decision}")
        return list(body.get("approved" if decision == "approve" else "rejected", []))

    async def sessions(self) -> dict[str, dict[str, Any]]:
        """Per namespace, per replica URL: its sandbox sessions (`sessions`, `total`) or why it was not read
        (`error`)."""
        body = await self._call("GET", "/admin/sessions")
        return dict(body.get("namespaces", {}))

    async def end_session(self, namespace: str, replica: str, session: str) -> bool:
        """End one session on one replica, as `cleanup_session` would; whether the replica still held it."""
        body = await self._call(
            "POST", "/admin/sessions/end", {"namespace": namespace, "replica": replica, "session": session}
        )
        return bool(body.get("ended"))
