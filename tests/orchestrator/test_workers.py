"""The worker pool against two scripted workers: balancing, affinity, retries before the first token, 502s."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from conftest import scenario, serving
from invariants import check_stream

from orchestrator.worker.scripted import Scenario, ScriptedModel
from orchestrator.worker.scripted import build_app as build_worker

SLOW = "<|channel|>final<|message|>" + "slow " * 2000 + "<|return|>"
FAST = "<|channel|>analysis<|message|>Thinking.<|end|><|start|>assistant<|channel|>final<|message|>Quick.<|return|>"


def wait_for(predicate, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_new_conversations_go_to_the_least_loaded_worker_and_chains_stay_on_theirs(make_stack, two_workers):
    (url1, w1), (url2, w2) = two_workers
    for w in (w1, w2):
        w.scenario = scenario([{"match": "busy", "reply": SLOW, "delay_s": 0.01}], default=FAST)
    stack = make_stack(worker_urls=[url1, url2])
    a = stack.client.responses.create(model="gpt-oss", input="conversation A")
    assert (w1.stats.requests, w2.stats.requests) == (1, 0)  # a tie goes to the first worker
    busy = stack.client.responses.create(model="gpt-oss", input="busy B", background=True)
    wait_for(lambda: w1.stats.in_flight == 1, "the long generation on worker 1")
    c = stack.client.responses.create(model="gpt-oss", input="conversation C")
    assert (w1.stats.requests, w2.stats.requests) == (2, 1)  # worker 1 had one outstanding request
    a2 = stack.client.responses.create(model="gpt-oss", input="more of A", previous_response_id=a.id)
    assert (w1.stats.requests, w2.stats.requests) == (3, 1)  # affinity beats load: worker 1 holds A's prefix
    assert "more of A" in w1.encode_prompt_text(-1) and a2.usage.input_tokens_details.cached_tokens > 0
    stack.client.responses.create(model="gpt-oss", input="more of C", previous_response_id=c.id)
    assert (w1.stats.requests, w2.stats.requests) == (3, 2)
    assert stack.client.responses.cancel(busy.id).status == "cancelled"
    wait_for(lambda: w1.stats.in_flight == 0, "the cancelled generation to be aborted")
    assert w1.stats.aborted == 1
    workers = httpx.get(f"{stack.url}/healthz").json()["workers"]
    assert [w["outstanding"] for w in workers] == [0, 0]


@pytest.mark.parametrize(
    "failure",
    [{"status": 503}, {"status": 429}, {"fail_after": 0, "fail_mode": "drop"}, {"fail_after": 0, "fail_mode": "error"}],
    ids=["http-503", "http-429", "dropped-before-first-token", "error-chunk-before-first-token"],
)
def test_a_failure_before_the_first_token_is_retried_on_another_worker(make_stack, two_workers, failure):
    (url1, w1), (url2, w2) = two_workers
    w1.scenario = scenario([{"match": "", "reply": FAST, **failure}])
    w2.scenario = scenario([], default=FAST)
    stack = make_stack(worker_urls=[url1, url2])
    resp = stack.client.responses.create(model="gpt-oss", input="hi")
    assert resp.status == "completed" and resp.output_text == "Quick."
    assert (w1.stats.failed, w2.stats.completed) == (1, 1)


@pytest.mark.parametrize("mode", ["drop", "error"])
def test_a_worker_failing_mid_stream_is_a_502_without_retry(make_stack, two_workers, mode):
    (url1, w1), (url2, w2) = two_workers
    w1.scenario = scenario([{"match": "", "reply": FAST, "fail_after": 4, "fail_mode": mode}])
    w2.scenario = scenario([], default=FAST)
    stack = make_stack(worker_urls=[url1, url2])
    with pytest.raises(openai.APIStatusError) as err:
        stack.client.responses.create(model="gpt-oss", input="hi")
    assert err.value.status_code == 502 and err.value.body["code"] == "worker_error"
    assert "worker 1 failed mid-generation" in err.value.message and url1 not in err.value.message
    events = list(stack.client.responses.create(model="gpt-oss", input="hi", stream=True))
    final = check_stream(events)
    assert final.status == "failed" and final.error.code == "server_error" and "mid-generation" in final.error.message
    assert final.output[0].type == "reasoning" and final.output[0].status == "incomplete"
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")  # tokens did arrive
    assert w1.stats.failed == 2 and w2.stats.requests == 0  # never retried after the first token


def test_all_workers_failing_before_the_first_token_is_a_503_naming_the_last_error(make_stack, two_workers):
    (url1, w1), (url2, w2) = two_workers
    for w in (w1, w2):
        w.scenario = scenario([{"match": "", "reply": FAST, "status": 500}])
    stack = make_stack(worker_urls=[url1, url2])
    with pytest.raises(openai.APIStatusError) as err:
        stack.client.responses.create(model="gpt-oss", input="hi")
    assert err.value.status_code == 503 and "HTTP 500" in err.value.message
    assert (w1.stats.failed, w2.stats.failed) == (1, 1)


def test_a_worker_that_goes_down_is_taken_out_by_health_checks_and_healthz_degrades(make_stack, two_workers):
    from conftest import serving

    from orchestrator.worker.scripted import Scenario, ScriptedModel
    from orchestrator.worker.scripted import build_app as build_worker

    url2, w2 = two_workers[1]
    w2.scenario = scenario([], default=FAST)
    doomed = ScriptedModel(Scenario())
    with serving(build_worker(doomed)) as url1:
        stack = make_stack(worker_urls=[url1, url2], health_interval_s=0.05)
        assert httpx.get(f"{stack.url}/healthz").json()["status"] == "ok"
    wait_for(lambda: not httpx.get(f"{stack.url}/healthz").json()["workers"][0]["healthy"], "worker 1 marked down")
    assert stack.client.responses.create(model="gpt-oss", input="hi").output_text == "Quick."
    assert doomed.stats.requests == 0 and w2.stats.requests == 1
    assert httpx.get(f"{stack.url}/healthz").status_code == 200  # one healthy worker is enough
    dead = make_stack(worker_urls=[url1], health_interval_s=0.05)
    resp = httpx.get(f"{dead.url}/healthz")
    assert resp.status_code == 503 and resp.json()["status"] == "degraded"


def test_responses_one_after_another_share_one_connection_to_the_worker(make_stack):
    """A worker's stream read to its end gives its connection back to the pool: no response pays for a new one."""
    model, peers = ScriptedModel(Scenario()), []
    app = build_worker(model)

    async def recording(scope, receive, send):  # the worker, noting the client address of each completion
        if scope["type"] == "http" and scope["path"] == "/v1/completions":
            peers.append(scope["client"])
        await app(scope, receive, send)

    with serving(recording) as url:
        stack = make_stack(worker_urls=[url], health_interval_s=3600.0)  # no health check shares the pool meanwhile
        stack.client.responses.create(model="gpt-oss", input="first")
        events = list(stack.client.responses.create(model="gpt-oss", input="second", stream=True))
        stack.client.responses.create(model="gpt-oss", input="third")
    assert events[-1].type == "response.completed" and len(peers) == 3
    assert len(set(peers)) == 1, peers
