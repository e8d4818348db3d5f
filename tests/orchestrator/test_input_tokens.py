"""`POST /v1/responses/input_tokens` counts the prompt the turn loop sends, on both paths; unknown routes 404."""

from __future__ import annotations

import httpx
import openai
import pytest
from openai.types.responses import InputTokenCountResponse
from paths import Say, User
from test_basic import WEATHER_TOOL
from test_paths import on_path, scripted_chat  # noqa: F401

CI = {"type": "code_interpreter", "container": {"type": "auto"}}
# SCRIPTED stand-in for the model: one answer per question, so each response is one turn.
RULES = [(User("first"), Say("One.")), (User("second"), Say("Two."))]


def test_the_count_equals_the_usage_of_the_same_request_on_both_paths(on_path):  # noqa: F811
    stack = on_path(RULES)
    client = stack.client
    request = {"model": "m", "input": "first", "instructions": "Be brief.", "tools": [WEATHER_TOOL, CI]}
    counted = client.responses.input_tokens.count(**request)
    InputTokenCountResponse.model_validate(counted.model_dump(mode="json"))
    first = client.responses.create(**request)
    assert counted.input_tokens == first.usage.input_tokens > 0
    follow = {"model": "m", "input": "second", "previous_response_id": first.id, "tools": [WEATHER_TOOL, CI]}
    counted = client.responses.input_tokens.count(**follow)
    assert counted.input_tokens == client.responses.create(**follow).usage.input_tokens > first.usage.input_tokens
    conv = client.conversations.create(items=[{"role": "user", "content": "earlier words"}])
    in_conv = {"model": "m", "input": "first", "conversation": conv.id}
    counted = client.responses.input_tokens.count(**in_conv)
    assert counted.input_tokens == client.responses.create(**in_conv).usage.input_tokens


def test_count_refusals_and_unknown_routes_answer_in_openai_shape(stack):
    with pytest.raises(openai.BadRequestError) as refused:  # not rendered here: refused, not ignored
        stack.client.responses.input_tokens.count(model="m", input="x", text={"format": {"type": "json_object"}})
    assert refused.value.body["param"] == "text"
    with pytest.raises(openai.NotFoundError):
        stack.client.responses.input_tokens.count(model="m", input="x", previous_response_id="resp_missing")
    for method, path in (("POST", "/v1/responses/nowhere"), ("PUT", "/v1/responses"), ("GET", "/v1/nothing")):
        answer = httpx.request(method, stack.url + path, trust_env=False)
        assert answer.status_code == 404
        assert answer.json()["error"] == {
            "message": f"Invalid URL ({method} {path})",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
