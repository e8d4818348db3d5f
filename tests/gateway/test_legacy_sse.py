"""The legacy SSE transport on the wire: the endpoint event, 202s, and errors for bad messages."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
import pytest

from tests.support.gateway import GatewayProc


def _events(lines: object) -> object:
    event: dict[str, str] = {}
    for line in lines:  # type: ignore[attr-defined]
        if not line:
            if event:
                yield event
            event = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            event[key] = value.removeprefix(" ")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_endpoint_event_names_the_connections_scheme_host_and_port(gateway: GatewayProc, host: str) -> None:
    url = f"http://{host}:{gateway.port}/fixture/sse"
    with httpx.Client(trust_env=False, timeout=10) as http, http.stream("GET", url) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _events(response.iter_lines())
        endpoint = next(events)  # type: ignore[call-overload]
        assert endpoint["event"] == "endpoint"
        parts = urlsplit(endpoint["data"])
        assert (parts.scheme, parts.netloc, parts.path) == ("http", f"{host}:{gateway.port}", "/fixture/messages/")

        bad = http.post(endpoint["data"], content=b"{oops", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == -32700
        init = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "initialize",
            "params": {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
        accepted = http.post(endpoint["data"], json=init)
        assert accepted.status_code == 202
        answer = json.loads(next(events)["data"])  # type: ignore[call-overload]
        assert answer["id"] == 9
        assert answer["result"]["serverInfo"]["name"] == "fixture"
        assert answer["result"]["protocolVersion"] == "2024-11-05"
        call = {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "nope-not-a-tool"}}
        assert http.post(endpoint["data"], json=call).status_code == 202
        answer = json.loads(next(events)["data"])  # type: ignore[call-overload]
        assert answer["id"] == 10
