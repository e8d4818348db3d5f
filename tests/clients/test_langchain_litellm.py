"""LangChain's `ChatOpenAI` and LiteLLM against a fleet with a chat-template model beside the Harmony one: their
default path (chat completions) relayed by model name to the SCRIPTED chat-template stand-in (`scripted-chat`,
`toolfleet worker --scripted --api chat`, which the default fleet does not run), and the Responses API. The same
clients' defaults against the default fleet (the Harmony stand-in alone): `test_readme.py`."""

from __future__ import annotations

import pytest

from tests.clients.conftest import chat_script, run_python

LANGCHAIN = """
import json, os
from langchain_openai import ChatOpenAI

plain = ChatOpenAI(model="scripted-chat", base_url=os.environ["BASE_URL"], api_key="test-key")
responses = ChatOpenAI(model="scripted-gpt-oss", base_url=os.environ["BASE_URL"], api_key="test-key",
                       use_responses_api=True)
streamed = "".join(chunk.content for chunk in plain.stream("Say hello to LangChain."))
print(json.dumps({"chat": plain.invoke("Say hello to LangChain.").content, "streamed": streamed,
                  "responses": responses.invoke("Say hello over Responses.").text}))
"""

LITELLM = """
import json, os
import litellm

base = os.environ["BASE_URL"]
chat = litellm.completion(model="openai/scripted-chat", api_base=base, api_key="test-key",
                          messages=[{"role": "user", "content": "Say hello to LiteLLM."}])
streamed = "".join(c.choices[0].delta.content or "" for c in litellm.completion(
    model="openai/scripted-chat", api_base=base, api_key="test-key", stream=True,
    messages=[{"role": "user", "content": "Say hello to LiteLLM."}]))
resp = litellm.responses(model="openai/scripted-gpt-oss", api_base=base, api_key="test-key",
                         input="Say hello over Responses.")
text = "".join(part.text for item in resp.output if item.type == "message" for part in item.content)
print(json.dumps({"chat": chat.choices[0].message.content, "streamed": streamed, "responses": text}))
"""


@pytest.mark.parametrize("client", [LANGCHAIN, LITELLM], ids=["langchain-chat-openai", "litellm"])
def test_the_client_works_on_its_default_chat_completions_path_streaming_and_on_the_responses_api(
    clients, fleet, client
):
    chat_script(fleet.chat, [("^user: Say hello to ", {"content": "Hello, chat client."})])
    fleet.script([("Say hello over Responses", "<|channel|>final<|message|>Hello over Responses.<|return|>")])
    got = run_python(clients, client, f"{fleet.url}/v1")
    assert got == {
        "chat": "Hello, chat client.",
        "streamed": "Hello, chat client.",
        "responses": "Hello over Responses.",
    }
