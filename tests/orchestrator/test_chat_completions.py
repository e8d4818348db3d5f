"""`/v1/chat/completions` relayed to a worker, and `GET /v1/models/{id}`: what a chat-completions client sees."""

from __future__ import annotations

import httpx
import openai
import pytest

from orchestrator.worker.scripted import ChatScenario, ScriptedChatModel, build_chat_app
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
    with pytest.raises(openai.BadRequestError):
        stack.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "busy"}])
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
