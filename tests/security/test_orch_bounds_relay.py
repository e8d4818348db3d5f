"""Issue 32, finding 9: the `/v1/chat/completions` relay sends the worker an allowlist of OpenAI's
chat-completions fields, with `n` 1 and the token budget bounded; a template or processor field, or any
field it does not know, is a 400 naming it and never reaches the worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import CompletionCreateParamsBase

from orchestrator.chat.completions import FIELDS, NO_OP, RELAYED
from orchestrator.worker.scripted import ScriptedChatModel
from tests.security.orch_bounds_support import KEYS, MODEL, bearer, gated_worker, orchestrator

BUDGET = 64
CONTEXT = 4096
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def relay() -> Iterator[tuple[httpx.Client, ScriptedChatModel]]:
    with (
        gated_worker() as (worker_url, _, model),
        orchestrator(worker_url, max_output_tokens=BUDGET, context_tokens=CONTEXT) as url,
        httpx.Client(base_url=url, headers=bearer(KEYS[0]), timeout=30) as http,
    ):
        yield http, model


def post(relay: tuple[httpx.Client, ScriptedChatModel], **body: Any) -> tuple[httpx.Response, dict[str, Any] | None]:
    """The relay's answer, and the body the worker got for it (None: the worker got nothing)."""
    http, model = relay
    before = model.stats.requests
    answer = http.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, **body})
    return answer, model.requests[-1] if model.stats.requests > before else None


def refused(answer: httpx.Response, param: str) -> dict[str, Any]:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and param in error["message"]
    return error


def test_every_chat_completions_parameter_of_the_sdk_is_classified():
    assert set(CompletionCreateParamsBase.__annotations__) <= set(FIELDS)


def test_n_other_than_one_is_a_400_naming_n(relay):
    for n in (2, 0, 16):
        answer, sent = post(relay, n=n)
        assert refused(answer, "n")["code"] == "unsupported_value" and sent is None
    answer, sent = post(relay, n=1)
    assert answer.status_code == 200 and sent is not None and sent["n"] == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("chat_template", "{{ messages }}"),
        ("chat_template_kwargs", {"enable_thinking": False}),
        ("logits_processors", ["mod.Processor"]),
        ("guided_json", {"type": "object"}),
        ("guided_regex", ".*"),
        ("structured_outputs", {"regex": ".*"}),
        ("mm_processor_kwargs", {"size": 1}),
    ],
)
def test_a_template_or_processor_field_is_a_400_naming_it_and_never_reaches_the_worker(relay, field, value):
    answer, sent = post(relay, **{field: value})
    error = refused(answer, field)
    assert error["code"] == "unsupported_parameter" and "template or processor" in error["message"]
    assert sent is None


def test_an_unknown_field_is_a_400_naming_it(relay):
    answer, sent = post(relay, top_k=5)
    assert refused(answer, "top_k")["code"] == "unknown_parameter" and sent is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("audio", {"voice": "alloy", "format": "mp3"}),
        ("functions", [{"name": "f", "parameters": {}}]),
        ("web_search_options", {}),
        ("prediction", {"type": "content", "content": "x"}),
        ("modalities", ["text", "audio"]),
        ("store", True),
    ],
)
def test_a_refused_openai_field_is_a_400_naming_it(relay, field, value):
    answer, sent = post(relay, **{field: value})
    refused(answer, field)
    assert sent is None


def test_the_token_budget_is_bounded_as_a_responses_is(relay):
    answer, sent = post(relay)
    assert answer.status_code == 200 and sent is not None and sent["max_completion_tokens"] == BUDGET
    for name in ("max_tokens", "max_completion_tokens"):
        for value in (CONTEXT + 1, 10**9, 0):
            answer, sent = post(relay, **{name: value})
            assert refused(answer, name)["code"] == "invalid_value" and sent is None
        answer, sent = post(relay, **{name: 8})
        assert answer.status_code == 200 and sent is not None and sent[name] == 8


CLIENT_DEFAULTS = {
    "openai-sdk": {"temperature": 0.2, "top_p": 0.9, "seed": 7, "stop": ["\n\n"], "user": "u-1"},
    "openai-sdk-stream": {"stream": True, "stream_options": {"include_usage": True, "include_obfuscation": False}},
    "langchain-chat-openai": {"stream": False, "n": 1, "temperature": 0.7},
    "langchain-chat-openai-stream": {"stream": True, "stream_options": {"include_usage": True}},
    "litellm": {"metadata": {"run": "1"}, "store": False, "service_tier": "auto", "parallel_tool_calls": True},
    "tools": {
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto",
        "response_format": {"type": "text"},
        "logprobs": True,
        "top_logprobs": 2,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.1,
        "logit_bias": {"42": 1},
        "reasoning_effort": "low",
        "modalities": ["text"],
        "safety_identifier": "s",
        "prompt_cache_key": "k",
    },
}


@pytest.mark.parametrize("client", list(CLIENT_DEFAULTS))
def test_what_the_real_clients_send_is_relayed_without_the_hints(relay, client):
    body = CLIENT_DEFAULTS[client]
    answer, sent = post(relay, **body)
    assert answer.status_code == 200, answer.text
    assert sent is not None
    for name, value in body.items():
        if FIELDS[name][0] == NO_OP:
            assert name not in sent  # a hint with no effect is not the worker's business
        elif name == "stream_options":
            assert sent[name] == {"include_usage": True}
        else:
            assert sent[name] == value


NAMES = st.one_of(st.sampled_from(sorted(FIELDS)), st.from_regex(r"[a-z_]{1,24}", fullmatch=True), st.text(max_size=12))
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**6), st.text(max_size=8), st.lists(st.integers(), max_size=2)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra=st.dictionaries(NAMES, VALUES, min_size=1, max_size=3))
def test_any_extra_fields_are_relayed_only_when_allowlisted_else_a_400_naming_one(relay, extra):
    extra.pop("messages", None)
    extra.pop("model", None)
    answer, sent = post(relay, **extra)
    assert answer.status_code < 500, answer.text
    if answer.status_code == 400 and answer.json()["error"]["param"] in extra:
        assert sent is None
        return
    if answer.status_code == 200:
        assert sent is not None and set(extra) <= set(FIELDS)
        assert all(FIELDS[k][0] == RELAYED for k in sent)
        return
    # refused by the worker itself (its 4xx relayed): only for fields this relay sends on
    assert set(extra) <= set(FIELDS), answer.text
