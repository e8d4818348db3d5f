"""Against a real vLLM CPU worker with a tiny random gpt-oss model: whatever comes back stays well-formed."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from conftest import serving
from invariants import check_stream
from openai.types.responses import Response

from orchestrator.app import create_app
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.worker.client import WorkerPool
from tests.support.vllm import vllm_worker  # noqa: F401 (the session fixture)

pytestmark = pytest.mark.slow


@pytest.fixture
def counted(vllm_worker):  # noqa: F811
    """An orchestrator over the real worker, counting the tokens the worker reports."""
    seen = {"prompt": 0, "output": 0, "logprobs": []}
    pool = WorkerPool([vllm_worker.base_url])

    async def generate(req):
        async for chunk in pool.generate(req):
            if chunk.cached_tokens is None and chunk.prompt_tokens is not None:
                seen["prompt"] += chunk.prompt_tokens
            seen["output"] += len(chunk.token_ids)
            if chunk.token_ids:
                seen["logprobs"].append(chunk.logprobs)
            yield chunk

    settings = OrchestratorSettings(worker_urls=[vllm_worker.base_url], max_output_tokens=48, date="2026-12-02")
    app = create_app(settings, generate=generate, pool=pool, stores=SQLiteStores())
    with serving(app) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120), seen


def test_real_worker_non_streaming_is_well_formed_and_usage_matches(counted):
    client, seen = counted
    resp = client.responses.create(model="m", input="Say hello.", temperature=0)
    Response.model_validate(resp.model_dump())
    assert resp.status in ("completed", "incomplete")
    assert resp.usage.input_tokens == seen["prompt"] and resp.usage.output_tokens == seen["output"] > 0


def test_real_worker_streaming_is_well_formed(counted):
    client, seen = counted
    events = list(client.responses.create(model="m", input="Count to three.", stream=True, temperature=0))
    final = check_stream(events)
    assert final.status in ("completed", "incomplete")
    assert final.usage.output_tokens == seen["output"] > 0


def test_real_worker_logprobs_arrive_per_token_when_included(counted):
    client, seen = counted
    events = list(
        client.responses.create(
            model="m",
            input="Say hi.",
            stream=True,
            temperature=0,
            top_logprobs=2,
            include=["message.output_text.logprobs"],
        )
    )
    final = check_stream(events)
    assert seen["logprobs"] and all(lps is not None and all(lp is not None for lp in lps) for lps in seen["logprobs"])
    assert all(len(lp.top) >= 2 and lp.logprob <= 0 for lps in seen["logprobs"] for lp in lps)
    for item in final.output:  # a random model may or may not reach a final message
        if item.type == "message":
            assert all(len(lp.top_logprobs) == 2 for lp in item.content[0].logprobs)


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}, "ok": {"type": "boolean"}},
    "required": ["answer", "ok"],
    "additionalProperties": False,
}


def test_real_worker_answers_json_that_validates_against_the_requested_schema(counted):
    client, _ = counted
    fmt = {"format": {"type": "json_schema", "name": "verdict", "schema": ANSWER_SCHEMA, "strict": True}}
    events = list(
        client.responses.create(
            model="m", input="Is tea a drink?", text=fmt, max_output_tokens=120, stream=True, temperature=1.0
        )
    )
    final = check_stream(events)
    try:
        answer = json.loads(final.output_text)
    except ValueError:
        pytest.fail(f"not JSON: {final.output_text!r} ({[o.type for o in final.output]})")
    jsonschema.validate(answer, ANSWER_SCHEMA)  # random weights: only the constraint can do this
    assert final.output[-1].status == "completed"
    assert final.text.format.type == "json_schema"
