"""`/metrics` moves: route latency, responses, tokens, tool calls by namespace and outcome, worker health."""

from __future__ import annotations

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_workers import wait_for

PY_CALL = "<|channel|>analysis to=python<|message|>print(1)<|call|>"
DONE = "<|channel|>final<|message|>done<|return|>"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_routes_responses_tokens_and_tool_calls(stack):
    stack.script([("python to=assistant", DONE), ("compute", PY_CALL)])
    ok = stack.client.responses.create(model="gpt-oss", input="compute", tools=[{"type": "code_interpreter"}])
    stack.client.responses.retrieve(ok.id)
    unknown = "<|channel|>commentary to=nosuch.tool <|constrain|>json<|message|>{}<|call|>"
    stack.script([("unknown tool", DONE), ("go", unknown)])
    bad = stack.client.responses.create(model="gpt-oss", input="go", tools=[{"type": "code_interpreter"}])
    with pytest.raises(openai.NotFoundError):
        stack.client.responses.retrieve("resp_missing")
    m = scrape(stack.url)
    hist = "toolfleet_orchestrator_request_seconds_count"
    assert value(m, hist, route="/v1/responses", method="POST", status="200") == 2
    assert value(m, hist, route="/v1/responses/{rid}", method="GET", status="200") == 1
    assert value(m, hist, route="/v1/responses/{rid}", method="GET", status="404") == 1  # a template, not the id
    assert value(m, "toolfleet_orchestrator_responses_total", status="completed") == 2
    tokens = "toolfleet_orchestrator_tokens_total"
    assert value(m, tokens, kind="input") == ok.usage.input_tokens + bad.usage.input_tokens
    assert value(m, tokens, kind="output") == ok.usage.output_tokens + bad.usage.output_tokens
    assert value(m, tokens, kind="tool_output") == (
        ok.usage.output_tokens_details.tool_output_tokens + bad.usage.output_tokens_details.tool_output_tokens
    )
    calls = "toolfleet_orchestrator_tool_calls_total"
    assert value(m, calls, namespace="python", outcome="ok") == 1
    assert value(m, calls, namespace="unknown", outcome="rejected") == 1
    assert value(m, "toolfleet_orchestrator_responses_in_flight") == 0


def test_tool_outcomes_are_labelled_by_what_went_wrong(make_stack):
    stack = make_stack(python_url="http://127.0.0.1:9/mcp")
    fail = '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd":["fail"]}<|call|>'
    stack.script([("python to=assistant|command failed", DONE), ("compute", PY_CALL), ("run", fail)])
    stack.client.responses.create(model="gpt-oss", input="compute", tools=[{"type": "code_interpreter"}])
    stack.client.responses.create(model="gpt-oss", input="run", tools=[{"type": "mcp", "server_label": "container"}])
    m = scrape(stack.url)
    calls = "toolfleet_orchestrator_tool_calls_total"
    assert value(m, calls, namespace="python", outcome="unavailable") == 1
    assert value(m, calls, namespace="container", outcome="tool_error") == 1


def test_worker_health_outstanding_and_failures_are_exported(make_stack, two_workers):
    (url1, w1), (url2, w2) = two_workers
    from conftest import scenario

    w1.scenario = scenario([{"match": "", "reply": DONE, "status": 503}])
    w2.scenario = scenario([], default=DONE)
    stack = make_stack(worker_urls=[url1, url2, "http://127.0.0.1:9"])
    assert stack.client.responses.create(model="gpt-oss", input="hi").status == "completed"
    m = scrape(stack.url)
    assert value(m, "toolfleet_orchestrator_worker_healthy", worker=url1) == 1
    assert value(m, "toolfleet_orchestrator_worker_healthy", worker="http://127.0.0.1:9") == 0
    assert value(m, "toolfleet_orchestrator_worker_failures_total", worker=url1, stage="before_first_token") == 1
    assert value(m, "toolfleet_orchestrator_worker_failures_total", worker=url2, stage="before_first_token") == 0
    assert value(m, "toolfleet_orchestrator_worker_outstanding", worker=url2) == 0
    w2.scenario = scenario([], default=DONE, token_delay_s=0.01)
    w2.scenario.default = "<|channel|>final<|message|>" + "slow " * 500 + "<|return|>"
    bg = stack.client.responses.create(model="gpt-oss", input="hi again", background=True)
    wait_for(
        lambda: value(scrape(stack.url), "toolfleet_orchestrator_worker_outstanding", worker=url2) == 1,
        "the background generation to show as outstanding",
    )
    assert value(scrape(stack.url), "toolfleet_orchestrator_responses_in_flight") == 1
    stack.client.responses.cancel(bg.id)
