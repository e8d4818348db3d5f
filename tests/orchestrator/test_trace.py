"""One Responses request with a python call is one connected OpenTelemetry trace across the real processes.

Four real processes (the scripted worker stands in for the model's choices and is labelled as such; the
orchestrator, the gateway and the python tool server with its local bubblewrap sandbox are the real
services) each write their finished spans as JSON lines to one file (`TOOLFLEET_TRACE_FILE`, the kit's
test exporter). The client sends its own `traceparent`; the test follows the parent links back to it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from orchestrator.worker.scripted import Scenario, ScriptedModel
from orchestrator.worker.scripted import build_app as build_worker
from tests.support.asgi import serve_asgi
from tests.support.service import Service, running_service
from toolkit.tracing import TRACE_FILE_ENV

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the python server's local backend needs bwrap")

PY_CALL = "<|channel|>analysis to=python<|message|>print(6 * 7)<|call|>"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Service], Path, list[str | None]]]:
    tmp = tmp_path_factory.mktemp("trace")
    spans = tmp / "spans.jsonl"
    env = {TRACE_FILE_ENV: str(spans)}
    seen: list[str | None] = []
    scenario = tmp / "scenario.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "rules": [
                    {"match": "python to=assistant", "reply": "<|channel|>final<|message|>It printed 42.<|return|>"},
                    {"match": "trace me", "reply": PY_CALL},
                ]
            }
        )
    )
    with running_service(["-m", "tools.python_sandbox", "--backend", "local"], env=env) as python:
        routes = tmp / "routes.yaml"
        routes.write_text(yaml.safe_dump({"namespaces": {"python": {"replicas": [f"{python.url}/mcp"]}}}))
        with (
            running_service(["-m", "gateway", "--config", str(routes)], env=env) as gateway,
            serve_asgi(_Recorder(build_worker(ScriptedModel(Scenario.load(scenario))), seen)) as worker_url,
            running_service(
                [
                    "-m",
                    "orchestrator",
                    "--worker-urls",
                    json.dumps([worker_url]),
                    "--tools-url",
                    gateway.url,
                    "--store-path",
                    str(tmp / "store.db"),
                ],
                env=env,
            ) as orchestrator,
        ):
            yield {"python": python, "gateway": gateway, "orchestrator": orchestrator}, spans, seen


class _Recorder:
    """ASGI wrapper of the (scripted) worker that keeps the `traceparent` of each completion request."""

    def __init__(self, app: Any, seen: list[str | None]) -> None:
        self.app, self.seen = app, seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/completions":
            self.seen.append(dict(scope["headers"]).get(b"traceparent", b"").decode() or None)
        await self.app(scope, receive, send)


def _spans_of(path: Path, trace_id: str, *, until: list[str], timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The trace's spans once every name in `until` has been exported (spans end after the HTTP answer)."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        spans = [s for s in map(json.loads, lines) if s["trace_id"] == trace_id]
        if all(any(s["name"] == name for s in spans) for name in until) or time.monotonic() > deadline:
            return spans
        time.sleep(0.05)


def _logs(service: Service) -> list[dict[str, Any]]:
    return [json.loads(line) for line in service.log().splitlines() if line.startswith("{")]


def test_a_python_call_is_one_trace_from_the_client_through_gateway_and_tool_to_the_sandbox(fleet):
    services, path, seen = fleet
    seen.clear()
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    response = httpx.post(
        f"{services['orchestrator'].url}/v1/responses",
        json={"model": "gpt-oss", "input": "trace me", "tools": [{"type": "code_interpreter"}]},
        headers={"traceparent": f"00-{trace_id}-{client_span}-01", "x-request-id": "req-trace-1"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["output"][0]["type"] == "code_interpreter_call" and body["output"][0]["status"] == "completed"

    spans = _spans_of(path, trace_id, until=["POST /v1/responses", "response", "sandbox.run", "python.python"])
    by_id = {s["span_id"]: s for s in spans}
    server = next(s for s in spans if s["name"] == "POST /v1/responses")
    assert server["parent_id"] == client_span and server["service"] == "orchestrator"
    assert server["attributes"]["toolfleet.request_id"] == "req-trace-1"

    def parent(span: dict[str, Any]) -> dict[str, Any]:
        assert span["parent_id"] in by_id, f"{span['name']} ({span['service']}) has a parent outside the trace"
        return by_id[span["parent_id"]]

    def chain(span: dict[str, Any]) -> list[str]:
        """The span and its ancestors up to the orchestrator's server span, as `service:name`."""
        names = [f"{span['service']}:{span['name']}"]
        while span is not server:
            span = parent(span)
            names.append(f"{span['service']}:{span['name']}")
        return names

    resp_span = next(s for s in spans if s["name"] == "response")
    conversation = resp_span["attributes"]["toolfleet.conversation_id"]
    assert resp_span["attributes"]["toolfleet.response_id"] == body["id"]
    assert resp_span["attributes"]["toolfleet.outcome"] == "ok"
    assert chain(resp_span)[-1] == "orchestrator:POST /v1/responses"

    workers = [s for s in spans if s["name"] == "worker /v1/completions"]
    assert len(workers) == 2 and all(parent(w) is resp_span for w in workers)  # one per turn
    assert sorted(seen) == sorted(f"00-{trace_id}-{w['span_id']}-01" for w in workers)  # the worker got each

    sandbox = next(s for s in spans if s["name"] == "sandbox.run")
    hops = chain(sandbox)
    assert hops[:2] == ["python:sandbox.run", "python:python.python"]
    assert hops[2] == "gateway:gateway python tools/call"
    assert hops[3] == "orchestrator:tool python"  # the lean MCP client sends in the tool span itself
    assert hops[4] == "orchestrator:response" and hops[-1] == "orchestrator:POST /v1/responses"

    tool = parent(sandbox)
    attrs = tool["attributes"]
    assert attrs["toolfleet.namespace"] == "python" and attrs["toolfleet.tool"] == "python"
    assert attrs["toolfleet.session_id"] == conversation and attrs["toolfleet.outcome"] == "ok"
    gateway_span = parent(tool)
    assert gateway_span["attributes"]["toolfleet.session_id"] == conversation
    assert gateway_span["attributes"]["toolfleet.outcome"] == "ok"

    every = [json.loads(line) for line in path.read_text().splitlines()]
    ours = [
        s
        for s in every
        if conversation
        in (s["attributes"].get("toolfleet.session_id"), s["attributes"].get("toolfleet.conversation_id"))
    ]
    assert ours and all(s["trace_id"] == trace_id for s in ours)  # nothing of this conversation fell out of the trace

    python_calls = [e for e in _logs(services["python"]) if e.get("event") == "tool.call" and e.get("tool") == "python"]
    assert [(e["trace_id"], e["request_id"]) for e in python_calls] == [(trace_id, "req-trace-1")]
    orchestrator_calls = [e for e in _logs(services["orchestrator"]) if e.get("event") == "tool.call"]
    assert [(e["trace_id"], e["response_id"], e["request_id"]) for e in orchestrator_calls] == [
        (trace_id, body["id"], "req-trace-1")
    ]
    gateway_calls = [e for e in _logs(services["gateway"]) if e.get("session_id") == conversation]
    assert gateway_calls and all(e["trace_id"] == trace_id for e in gateway_calls)
    forwarded = {e.get("request_id") for e in gateway_calls if e.get("event") == "gateway.request"}
    assert forwarded == {"req-trace-1"}  # one request id joins the three services' logs


def test_a_request_without_traceparent_starts_a_new_trace_that_still_reaches_the_sandbox(fleet):
    services, path, _ = fleet
    response = httpx.post(
        f"{services['orchestrator'].url}/v1/responses",
        json={"model": "gpt-oss", "input": "trace me", "tools": [{"type": "code_interpreter"}]},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    rid = response.json()["id"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        every = [json.loads(line) for line in path.read_text().splitlines()]
        resp_span = next((s for s in every if s["attributes"].get("toolfleet.response_id") == rid), None)
        if resp_span is not None:
            break
        time.sleep(0.1)
    assert resp_span is not None
    spans = _spans_of(path, resp_span["trace_id"], until=["POST /v1/responses", "sandbox.run"])
    server = next(s for s in spans if s["name"] == "POST /v1/responses")
    assert server["parent_id"] is None  # a root: the orchestrator started this trace
    assert {s["service"] for s in spans} >= {"orchestrator", "gateway", "python"}
