"""Third-party MCP servers (allowed_tools, approvals), background + cancel, replay, and bad input."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from invariants import check_completed_at, check_stream
from openai.types.responses import Response
from openai.types.responses.response_output_item import McpCall

from tests.support.service import wait_until

FORECAST = '<|channel|>commentary to=weather.get_forecast <|constrain|>json<|message|>{"city":"Oslo"}<|call|>'
DELETE = '<|channel|>commentary to=weather.delete_city <|constrain|>json<|message|>{"city":"Oslo"}<|call|>'
DONE = "<|channel|>final<|message|>Done.<|return|>"


def weather(tool_urls, **extra):
    return {"type": "mcp", "server_label": "weather", "server_url": tool_urls["weather"], **extra}


def test_mcp_server_tools_are_listed_and_called(stack, tool_urls):
    stack.script([("weather.get_forecast to=assistant", DONE), ("forecast", FORECAST)])
    events = list(
        stack.client.responses.create(
            model="gpt-oss", input="forecast?", tools=[weather(tool_urls, require_approval="never")], stream=True
        )
    )
    resp = check_stream(events)
    listing, call = resp.output[0], resp.output[1]
    assert listing.type == "mcp_list_tools" and {t.name for t in listing.tools} == {"get_forecast", "delete_city"}
    assert call.type == "mcp_call" and call.name == "get_forecast" and call.output.startswith("Sunny in Oslo")
    assert "(session conv_" in call.output  # the conversation-stable session id was sent
    assert "namespace weather" in stack.model.encode_prompt_text(-1)


def test_allowed_tools_hides_and_refuses_other_tools(stack, tool_urls):
    stack.script([("not allowed", DONE), ("delete", DELETE)])
    tool = weather(tool_urls, require_approval="never", allowed_tools=["get_forecast"])
    resp = stack.client.responses.create(model="gpt-oss", input="delete", tools=[tool])
    assert "type delete_city" not in stack.model.encode_prompt_text(-1)
    call = next(o for o in resp.output if o.type == "mcp_call")
    assert call.status == "failed" and resp.output_text == "Done."
    assert call.error.type == "mcp_protocol_error" and "not allowed" in call.error.message


def test_failed_mcp_call_streams_a_structured_error_the_sdk_validates_strictly(stack, tool_urls):
    """The streamed output_item.done of a failed mcp_call passes the SDK's strict model validation
    (model_validate, not construct): its `error` is OpenAI's McpToolCallError object, not a string."""
    stack.script([("not allowed", DONE), ("delete", DELETE)])
    tool = weather(tool_urls, require_approval="never", allowed_tools=["get_forecast"])
    with httpx.Client(
        base_url=str(stack.client.base_url), headers={"Authorization": "Bearer test"}, timeout=30
    ) as http:
        with http.stream(
            "POST", "responses", json={"model": "gpt-oss", "input": "delete", "tools": [tool], "stream": True}
        ) as r:
            events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "mcp_call"]
    assert len(done) == 1 and isinstance(done[0]["error"], dict)
    call = McpCall.model_validate(done[0])
    assert call.status == "failed" and call.error.type == "mcp_protocol_error" and call.error.code == -32602
    assert "not allowed" in call.error.message
    final = next(e for e in events if e["type"] == "response.completed")["response"]
    Response.model_validate(final)  # the whole completed response, strictly
    assert "not allowed" in stack.model.encode_prompt_text(-1)  # the model read the error's message back


def test_approval_request_pauses_and_the_approval_resumes(stack, tool_urls):
    stack.script([("weather.get_forecast to=assistant", DONE), ("forecast", FORECAST)])
    tool = weather(tool_urls)  # require_approval defaults to always
    first = stack.client.responses.create(model="gpt-oss", input="forecast?", tools=[tool])
    request = first.output[-1]
    assert request.type == "mcp_approval_request" and request.name == "get_forecast" and first.status == "completed"
    second = stack.client.responses.create(
        model="gpt-oss",
        previous_response_id=first.id,
        tools=[tool],
        input=[{"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}],
    )
    call = next(o for o in second.output if o.type == "mcp_call")
    assert call.approval_request_id == request.id and call.output.startswith("Sunny")
    assert second.output_text == "Done."


def test_denied_approval_tells_the_model(stack, tool_urls):
    stack.script([("did not approve", "<|channel|>final<|message|>OK, skipped.<|return|>"), ("forecast", FORECAST)])
    tool = weather(tool_urls, require_approval={"always": {"tool_names": ["get_forecast"]}})
    first = stack.client.responses.create(model="gpt-oss", input="forecast?", tools=[tool])
    second = stack.client.responses.create(
        model="gpt-oss",
        previous_response_id=first.id,
        tools=[tool],
        input=[{"type": "mcp_approval_response", "approval_request_id": first.output[-1].id, "approve": False}],
    )
    assert not [o for o in second.output if o.type == "mcp_call"] and second.output_text == "OK, skipped."


def test_unreachable_mcp_server_is_the_uniform_400(stack):
    with pytest.raises(openai.APIStatusError) as err:
        stack.client.responses.create(
            model="gpt-oss",
            input="x",
            tools=[{"type": "mcp", "server_label": "dead", "server_url": "http://127.0.0.1:9/mcp"}],
        )
    assert err.value.status_code == 400 and err.value.code == "mcp_server_unavailable" and "dead" in err.value.message


def test_background_response_can_be_polled_cancelled_and_replayed(stack):
    stack.script([], default="<|channel|>final<|message|>" + "slow " * 200 + "<|return|>", token_delay_s=0.01)
    resp = stack.client.responses.create(model="gpt-oss", input="hi", background=True)
    assert resp.status in ("queued", "in_progress")
    assert wait_until(lambda: stack.client.responses.retrieve(resp.id).status == "in_progress")
    cancelled = stack.client.responses.cancel(resp.id)
    assert cancelled.status == "cancelled"
    assert stack.client.responses.retrieve(resp.id).status == "cancelled"
    events = list(stack.client.responses.retrieve(resp.id, stream=True))
    final = check_stream(events)
    assert final.status == "cancelled"
    tail = list(stack.client.responses.retrieve(resp.id, stream=True, starting_after=3))
    assert [e.sequence_number for e in tail] == [e.sequence_number for e in events[4:]]


def test_completed_at_is_null_in_every_snapshot_until_the_response_completes(stack):
    stack.script([], default="<|channel|>final<|message|>" + "tick " * 40 + "<|return|>", token_delay_s=0.005)
    created = httpx.post(f"{stack.url}/v1/responses", json={"input": "hi", "background": True}, timeout=30).json()
    check_completed_at(created)
    get = f"{stack.url}/v1/responses/{created['id']}"
    assert wait_until(lambda: httpx.get(get, timeout=30).json()["status"] == "in_progress")
    check_completed_at(httpx.get(get, timeout=30).json())  # may have completed meanwhile: checked either way
    assert wait_until(lambda: httpx.get(get, timeout=30).json()["status"] == "completed")
    done = httpx.get(get, timeout=30).json()
    check_completed_at(done)
    assert Response.model_validate(done).completed_at == done["completed_at"]


def test_background_stream_can_be_resumed_while_running(stack):
    stack.script([], default="<|channel|>final<|message|>" + "tick " * 40 + "<|return|>", token_delay_s=0.005)
    stream = stack.client.responses.create(model="gpt-oss", input="hi", background=True, stream=True)
    first = [next(iter(stream)) for _ in range(5)]
    stream.close()
    rid = first[0].response.id
    rest = list(stack.client.responses.retrieve(rid, stream=True, starting_after=first[-1].sequence_number))
    final = check_stream(first + rest)
    assert final.status == "completed" and final.output_text.startswith("tick")


def test_completed_responses_cannot_be_cancelled_and_unknown_ids_are_404(stack):
    resp = stack.client.responses.create(model="gpt-oss", input="hi")
    with pytest.raises(openai.BadRequestError):
        stack.client.responses.cancel(resp.id)
    for call in (
        lambda: stack.client.responses.retrieve("resp_nope"),
        lambda: stack.client.responses.delete("resp_nope"),
        lambda: stack.client.responses.input_items.list("resp_nope"),
        lambda: stack.client.responses.create(model="gpt-oss", input="x", previous_response_id="resp_nope"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"input": 5}', "input"),
        (b'{"input": "x", "temperature": 9}', "temperature"),
        (b'{"input": "x", "tools": [{"type": "bogus"}]}', "bogus"),
        (b'{"input": [{"type": "message", "role": "user", "content": [{"type": "input_image"}]}]}', "input_image"),
        (b'{"input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}]}', "c1"),
        (b'{"input": "x", "background": true, "store": false}', "store"),
    ],
)
def test_malformed_requests_get_clear_400s(stack, body, fragment):
    resp = httpx.post(f"{stack.url}/v1/responses", content=body, headers={"content-type": "application/json"})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert fragment in error["message"] and error["type"] == "invalid_request_error"
    assert not stack.app.state.service.live


def test_worker_down_is_a_503_and_a_failed_stream(make_stack):
    stack = make_stack(worker_urls=["http://127.0.0.1:9"])
    with pytest.raises(openai.APIStatusError) as err:
        stack.client.responses.create(model="gpt-oss", input="hi")
    assert err.value.status_code == 503 and "worker" in err.value.message
    events = list(stack.client.responses.create(model="gpt-oss", input="hi", stream=True))
    final = check_stream(events)
    assert final.status == "failed" and final.error.code == "server_error" and "worker" in final.error.message


def test_second_worker_takes_over_when_the_first_is_down(make_stack, scripted):
    stack = make_stack(worker_urls=["http://127.0.0.1:9", scripted[0]])
    assert stack.client.responses.create(model="gpt-oss", input="hi").status == "completed"


def test_a_server_label_that_is_no_identifier_is_shown_as_a_namespace_and_echoed_as_given(stack, tool_urls):
    call = '<|channel|>commentary to=my_weather.get_forecast <|constrain|>json<|message|>{"city":"Oslo"}<|call|>'
    stack.script([("my_weather.get_forecast to=assistant", DONE), ("forecast", call)])
    tool = weather(tool_urls, server_label="my-weather")  # approval: always
    events = list(stack.client.responses.create(model="gpt-oss", input="forecast?", tools=[tool], stream=True))
    first = check_stream(events)
    listing, request = first.output
    assert (listing.server_label, request.type, request.server_label) == (
        "my-weather",
        "mcp_approval_request",
        "my-weather",
    )
    assert "namespace my_weather" in stack.model.encode_prompt_text(-1)
    approve = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    second = stack.client.responses.create(
        model="gpt-oss", previous_response_id=first.id, tools=[tool], input=[approve]
    )
    done = next(o for o in second.output if o.type == "mcp_call")
    assert done.server_label == "my-weather" and done.output.startswith("Sunny") and second.output_text == "Done."
    history = [{"role": "user", "content": "forecast?"}, request.model_dump(exclude_none=True), approve]
    stateless = stack.client.responses.create(model="gpt-oss", input=history, tools=[tool], store=False)
    assert next(o for o in stateless.output if o.type == "mcp_call").server_label == "my-weather"
    chosen = stack.client.responses.create(
        model="gpt-oss", input="forecast?", tools=[tool], tool_choice={"type": "mcp", "server_label": "my-weather"}
    )
    assert chosen.output[-1].type == "mcp_approval_request"
    with pytest.raises(openai.BadRequestError) as err:  # two labels the model would see as one namespace
        stack.client.responses.create(
            model="gpt-oss", input="x", tools=[tool, weather(tool_urls, server_label="my.weather")]
        )
    assert err.value.body["param"] == "tools[1].server_label"
