"""`/v1/chat/completions` relayed to a worker, and `GET /v1/models/{id}`: what a chat-completions client sees."""

from __future__ import annotations

import httpx
import openai
import pytest

from orchestrator.worker.scripted import ChatScenario, Scenario, ScriptedChatModel, ScriptedModel, build_chat_app
from orchestrator.worker.scripted.routes import build
from tests.support.asgi import serve_asgi


@pytest.fixture
def relay(make_stack):
    rules = [{"match": "^user: hi", "reply": {"content": "Hi there."}}, {"match": "^user: busy", "status": 400}]
    model = ScriptedChatModel(ChatScenario.from_dict({"rules": rules}))
    with serve_asgi(build_chat_app(model)) as url:
        yield make_stack(worker_urls=[url], max_concurrent_per_key=1), model


def test_a_chat_completion_is_relayed_with_the_callers_model_name_streaming_and_not(relay):
    stack, worker = relay
    answer = stack.client.chat.completions.create(model="my-model", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Hi there." and answer.model == "my-model"
    hi = [{"role": "user", "content": "hi"}]
    chunks = list(stack.client.chat.completions.create(model="my-model", stream=True, messages=hi))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi there."
    assert {c.model for c in chunks} == {"my-model"} and worker.stats.requests == 2


def test_a_request_the_worker_refuses_keeps_its_status_and_bad_bodies_are_a_400(relay):
    stack, _ = relay
    with pytest.raises(openai.BadRequestError) as refused:
        stack.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "busy"}])
    assert refused.value.body == {
        "message": "model 'm''s worker refused the request: scripted failure (HTTP 400)",
        "type": "invalid_request_error",
        "param": None,
        "code": "worker_refused",
    }
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client.chat.completions.create(model="m", messages=[])
    assert caught.value.body["param"] == "messages"
    assert httpx.get(f"{stack.url}/healthz").status_code == 200  # still serving


def test_models_by_id_answer_the_served_model_or_a_404(relay):
    stack, _ = relay
    assert stack.client.models.retrieve("scripted-chat").id == "scripted-chat"
    with pytest.raises(openai.NotFoundError) as caught:
        stack.client.models.retrieve("gpt-nothing")
    assert caught.value.body["code"] == "model_not_found"


def test_a_worker_without_chat_completions_is_a_404_naming_the_model_and_never_the_workers_address(make_stack):
    bare = build(ScriptedModel(Scenario()), [])  # a worker whose /v1/chat/completions is a bare 404
    with serve_asgi(bare) as url:
        stack = make_stack(worker_urls=[url], max_concurrent_per_key=1)
        hi = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.NotFoundError) as caught:
            stack.client.chat.completions.create(model="gpt-x", messages=hi)
        for _ in range(2):  # the refusal gave its running slot back (one per key): no 429 the second time
            with pytest.raises(openai.NotFoundError) as streamed:  # the worker refused before the stream began
                list(stack.client.chat.completions.create(model="gpt-x", messages=hi, stream=True))
    expected = (
        "model 'gpt-x' is not served on /v1/chat/completions: its worker has no chat completions "
        "(HTTP 404: Not Found); /v1/responses serves it"
    )
    assert caught.value.body == {
        "message": expected,
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_supported",
    }
    assert streamed.value.body == caught.value.body
    assert url.rsplit(":", 1)[1] not in str(caught.value.body)  # the worker's port, so its address
