"""Issue 32, finding 16 (orchestrator): the fleet's addresses reach only its operators.

`/healthz` tells anyone ok or not, and only an operator (the metrics token, or loopback when none is set)
its load and workers; `/metrics` is an operator's by default; worker failures (502/503, `response.failed`)
and tool errors (what the model and the client read) name the part by its role, never its URL.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import openai
import pytest

from tests.security.input_stack import Stack, orchestrator, send
from tests.support.asgi import free_port

GATEWAY = f"http://127.0.0.1:{free_port()}"  # a gateway address nothing listens on
PY_CALL = "<|channel|>analysis to=python<|message|>print(6 * 7)<|call|>"
DONE = "<|channel|>final<|message|>Done.<|return|>"


def _outside_address() -> str | None:
    """This host's address on its main interface (not loopback), or None where it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's source address
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


OUTSIDE = _outside_address()
needs_outside = pytest.mark.skipif(OUTSIDE is None, reason="this host has no non-loopback address")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with orchestrator(host="0.0.0.0", tools_url=GATEWAY) as started:
        yield started


def _worker_url(stack: Stack) -> str:
    return stack.app.state.service.settings.worker_urls[0]


@needs_outside
def test_healthz_tells_a_caller_from_outside_ok_and_nothing_more(stack: Stack):
    assert OUTSIDE is not None
    outside = send(stack.port, "GET", "/healthz", host=OUTSIDE)
    assert outside.status == 200 and outside.json() == {"status": "ok"}
    inside = send(stack.port, "GET", "/healthz").json()  # loopback with no metrics token: an operator
    assert inside["workers"][0]["url"] == _worker_url(stack) and inside["running"] == 0


@needs_outside
def test_metrics_without_a_token_answer_loopback_only(stack: Stack):
    assert OUTSIDE is not None
    outside = send(stack.port, "GET", "/metrics", host=OUTSIDE)
    assert outside.status == 403 and "--metrics-token" in outside.error["message"]
    assert _worker_url(stack) not in outside.body.decode()
    assert send(stack.port, "GET", "/metrics").status == 200


@pytest.mark.parametrize(
    "relayed", [{"x-forwarded-for": "203.0.113.9"}, {"forwarded": "for=203.0.113.9"}, {"x-real-ip": "203.0.113.9"}]
)
def test_a_loopback_request_a_proxy_relayed_is_no_operator(stack: Stack, relayed: dict[str, str]):
    """A reverse proxy on this host connects from loopback for every client it fronts: with no metrics token
    its requests see neither /metrics nor /healthz's details."""
    assert send(stack.port, "GET", "/metrics", headers=relayed).status == 403
    assert send(stack.port, "GET", "/healthz", headers=relayed).json() == {"status": "ok"}


def test_a_failing_worker_is_named_by_its_role(stack: Stack):
    stack.script([("", DONE)], fail_after=2, fail_mode="drop")
    url = _worker_url(stack)
    with pytest.raises(openai.APIStatusError) as failed:
        stack.client.responses.create(model="m", input="hi")
    assert failed.value.status_code == 502 and "worker 1" in failed.value.message
    assert url not in failed.value.message
    events = list(stack.client.responses.create(model="m", input="hi", stream=True))
    assert events[-1].type == "response.failed" and url not in events[-1].response.error.message
    compacted = send(stack.port, "POST", "/v1/responses/compact", json.dumps({"model": "m", "input": "hi"}).encode())
    assert compacted.status == 502 and "worker 1" in compacted.error["message"]
    assert url not in compacted.body.decode()


def test_a_tool_error_does_not_show_the_gateway_address(stack: Stack):
    stack.script([("python to=assistant", DONE), ("compute", PY_CALL)])
    resp = stack.client.responses.create(model="m", input="compute", tools=[{"type": "code_interpreter"}])
    call = resp.output[0]
    assert call.type == "code_interpreter_call" and call.status == "failed"
    logs = call.outputs[0].logs
    assert "cannot connect to the tool server" in logs
    address = GATEWAY.removeprefix("http://")
    assert address not in logs and address not in json.dumps(resp.model_dump())  # nowhere the client reads
