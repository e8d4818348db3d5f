"""Against a real vLLM CPU worker serving a tiny random-weight Qwen3 chat model (hermes tool parser,
qwen3 reasoning parser) on the chat path: whatever tokens come out, the response is well-formed, its
usage is the worker's own token count, and the openai SDK parses every event."""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import openai
import pytest
from conftest import serving
from invariants import check_stream
from openai.types.responses import Response
from test_basic import WEATHER_TOOL
from test_vllm_worker import ANSWER_SCHEMA

from orchestrator.app import create_app
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.worker.client import WorkerPool
from tests.support.vllm import CHAT_SERVE_ARGS, VllmServer, tiny_chat_model, vllm_server

pytestmark = pytest.mark.slow
TOOLS = [{"type": "code_interpreter"}, {"type": "web_search_preview"}, WEATHER_TOOL]


@pytest.fixture(scope="module")
def chat_vllm() -> Iterator[VllmServer]:
    """Module scope: stopped before any other module starts its own vLLM (one at a time on this machine)."""
    with tiny_chat_model() as model, vllm_server(model=model, extra_args=CHAT_SERVE_ARGS) as server:
        yield server


@pytest.fixture
def counted(chat_vllm, tool_urls):
    """An orchestrator over the real chat worker (path detected), adding up the usage the worker reports."""
    seen = {"prompt": 0, "completion": 0, "requests": 0}
    pool = WorkerPool([chat_vllm.base_url])

    async def chat(req):
        seen["requests"] += 1
        async for obj in pool.chat(req):
            if usage := obj.get("usage"):
                seen["prompt"] += usage["prompt_tokens"]
                seen["completion"] += usage["completion_tokens"]
            yield obj

    settings = OrchestratorSettings(
        worker_urls=[chat_vllm.base_url],
        max_output_tokens=48,
        max_tool_calls=2,
        python_url=tool_urls["python"],
        browser_url=tool_urls["browser"],
    )
    app = create_app(settings, generate=pool.generate, pool=pool, chat=chat, stores=SQLiteStores())
    with serving(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=300), seen


def _usage_matches(resp: Response, seen: dict) -> None:
    assert seen["requests"] >= 1
    assert resp.usage.input_tokens == seen["prompt"] and resp.usage.output_tokens == seen["completion"] > 0


def test_real_chat_worker_non_streaming_is_well_formed_and_usage_matches(counted):
    client, seen = counted
    resp = client.responses.create(model="m", input="Say hello.", tools=TOOLS, temperature=0)
    Response.model_validate(resp.model_dump())
    assert resp.status in ("completed", "incomplete")
    _usage_matches(resp, seen)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_real_chat_worker_streaming_is_well_formed(counted, temperature):
    client, seen = counted
    events = list(
        client.responses.create(
            model="m",
            input="What is the weather in Paris? Use python.",
            tools=TOOLS,
            stream=True,
            temperature=temperature,
        )
    )
    final = check_stream(events)
    assert final.status in ("completed", "incomplete")
    _usage_matches(final, seen)
    assert final.usage.output_tokens_details.reasoning_tokens > 0  # the template opens the reply in <think>


def test_real_chat_worker_under_required_tool_choice_is_well_formed(counted):
    client, seen = counted
    events = list(
        client.responses.create(
            model="m", input="weather?", tools=[WEATHER_TOOL], stream=True, tool_choice="required", temperature=0
        )
    )
    final = check_stream(events)
    assert final.status in ("completed", "incomplete", "failed")
    _usage_matches(final, seen)


def test_real_chat_worker_answers_json_that_validates_against_the_requested_schema(counted):
    """`reasoning.effort: none` reaches the template as `enable_thinking=false`: the think block is closed in the
    prompt, so vLLM's reasoning parser lets the constraint hold from the first token of the content."""
    client, _ = counted
    fmt = {"format": {"type": "json_schema", "name": "verdict", "schema": ANSWER_SCHEMA, "strict": True}}
    resp = client.responses.create(
        model="m", input="Is tea a drink?", text=fmt, reasoning={"effort": "none"}, max_output_tokens=48, temperature=1
    )
    Response.model_validate(resp.model_dump(by_alias=True))
    try:
        answer = json.loads(resp.output_text)
    except ValueError:
        pytest.fail(f"not JSON: {resp.output_text!r} ({[o.type for o in resp.output]})")
    jsonschema.validate(answer, ANSWER_SCHEMA)  # random weights: only the constraint can do this
    assert resp.usage.output_tokens_details.reasoning_tokens == 0 and resp.reasoning.effort == "none"
