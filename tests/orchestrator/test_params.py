"""Every create parameter of the openai SDK is classified, and what is refused or unknown is a 400 naming it."""

from __future__ import annotations

import typing

import openai
import pytest
from openai.types.responses import response_create_params

from orchestrator.request import tables
from orchestrator.request.params import HONOURED, NO_OP, PARAMS, REFUSED

SDK_PARAMS = set(typing.get_type_hints(response_create_params.ResponseCreateParamsBase)) | {"stream"}


def test_every_parameter_of_the_sdk_is_classified():
    assert sorted(SDK_PARAMS - set(PARAMS)) == [], "classify the new parameter in orchestrator/request/params.py"


def test_the_readme_table_is_generated_from_the_classification():
    assert tables.main(["--check"]) == 0, "run `python -m orchestrator.request.tables` and commit the README"


def test_an_unknown_parameter_is_a_400_naming_it(stack):
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client.post("/responses", cast_to=object, body={"input": "hi", "temprature": 0.5})
    assert caught.value.body["param"] == "temprature" and caught.value.body["code"] == "unknown_parameter"


@pytest.mark.parametrize("name", sorted(n for n, (what, _) in PARAMS.items() if what == REFUSED))
def test_a_refused_parameter_is_a_400_naming_it(stack, name):
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client.post("/responses", cast_to=object, body={"input": "hi", name: {"id": "x"}})
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == name and caught.value.body["code"] == "unsupported_parameter"


def test_the_response_echoes_the_sampling_values_used_and_the_no_op_hints(stack):
    stack.script([], default="<|channel|>final<|message|>ok<|return|>")
    body = {
        "input": "hi",
        "service_tier": "flex",
        "safety_identifier": "u1",
        "prompt_cache_key": "k1",
        "reasoning": {"effort": "xhigh", "summary": "auto"},
        "presence_penalty": 0.5,
    }
    resp = stack.client.post("/responses", cast_to=dict, body=body)
    assert {k: resp[k] for k in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "top_logprobs")} == {
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
    }
    assert resp["service_tier"] == "default" and resp["safety_identifier"] == "u1" and resp["prompt_cache_key"] == "k1"
    assert resp["reasoning"] == {"effort": "xhigh", "summary": "auto", "generate_summary": None}
    assert all(PARAMS[k][0] == NO_OP for k in ("service_tier", "safety_identifier"))
    assert PARAMS["prompt_cache_key"][0] == HONOURED
