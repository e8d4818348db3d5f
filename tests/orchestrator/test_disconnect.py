"""A client that goes away aborts its generation: the worker sees the request cancelled, streaming or not."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import scenario
from test_workers import wait_for

SLOW = "<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>final<|message|>" + "word " * 3000
SLOW += "<|return|>"


@pytest.fixture
def slow_stack(make_stack, two_workers):
    url, worker = two_workers[0]
    worker.scenario = scenario([{"match": "", "reply": SLOW, "delay_s": 0.005}])
    stack = make_stack(worker_urls=[url])
    return stack, worker


def test_closing_a_stream_early_aborts_the_worker_request(slow_stack):
    stack, worker = slow_stack
    stream = stack.client.responses.create(model="gpt-oss", input="go", stream=True)
    rid = None
    for event in stream:
        rid = rid or event.response.id
        if event.type == "response.output_text.delta":
            break
    stream.close()
    wait_for(lambda: worker.stats.aborted == 1, "the worker to see its request aborted")
    assert worker.stats.completed == 0 and worker.stats.in_flight == 0
    wait_for(lambda: not stack.app.state.service.live, "the response to settle")
    stored = stack.client.responses.retrieve(rid)
    assert stored.status == "cancelled" and stored.output[-1].status == "incomplete"


def test_a_non_streaming_client_that_disconnects_aborts_the_generation(slow_stack):
    stack, worker = slow_stack
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{stack.url}/v1/responses", json={"input": "go"}, timeout=httpx.Timeout(30, read=0.5))
    wait_for(lambda: worker.stats.aborted == 1, "the worker to see its request aborted")
    assert worker.stats.completed == 0 and worker.stats.in_flight == 0
    wait_for(lambda: not stack.app.state.service.live, "the response to settle")
    metrics = httpx.get(f"{stack.url}/metrics").text
    assert 'toolfleet_orchestrator_responses_total{status="cancelled"} 1.0' in metrics


def test_a_background_response_survives_its_creator_disconnecting(slow_stack):
    stack, worker = slow_stack
    worker.scenario = scenario([{"match": "", "reply": SLOW[:400] + "<|return|>", "delay_s": 0.005}])
    with httpx.stream(
        "POST", f"{stack.url}/v1/responses", json={"input": "go", "background": True, "stream": True}, timeout=30
    ) as resp:
        lines = resp.iter_lines()
        assert next(lines) == "event: response.created"
        rid = json.loads(next(lines).removeprefix("data: "))["response"]["id"]
    wait_for(lambda: not stack.app.state.service.live, "the background response to finish")
    assert stack.client.responses.retrieve(rid).status == "completed"
    assert worker.stats.aborted == 0 and worker.stats.completed == 1
