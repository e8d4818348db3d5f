"""The `file_search` tool type end to end through the real `openai` SDK: an orchestrator (in process) in front of
the scripted worker (a labelled stand-in for the model's choices), whose calls go through a real gateway to the
real file_search server (a subprocess with the real embedding model). Three files with distinct facts in one
store; the answer's `file_citation` must name the file the fact came from, and every event must validate
strictly against the SDK's types."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseFileSearchToolCall

from orchestrator.app import create_app
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.worker.scripted import ChatScenario, Scenario, ScriptedChatModel, ScriptedModel, build_chat_app
from orchestrator.worker.scripted import build_app as build_worker
from tests.clients.conftest import Clients, clients, run_python  # noqa: F401
from tests.orchestrator.conftest import scenario
from tests.orchestrator.invariants import check_stream
from tests.support.asgi import serve_asgi
from tests.support.gateway import gateway_config, running_gateway
from tests.support.service import Service

FACTS = {
    "otters.md": b"Sea otters hold hands while they sleep so that they do not drift apart.",
    "volcano.txt": b"Mount Erebus in Antarctica has a persistent lava lake at its summit crater.",
    "bread.md": b"Sourdough rises because wild yeast ferments the dough.",
}
# The stand-in model: the answer cites the first result of its call's answer, which is conversation message 3
# (system, user, the call): the marker the tool answer shows it, `【3:0†...】`.
CALL = '<|channel|>analysis to=file_search.search <|constrain|>json<|message|>{"queries": ["otters sleep"]}<|call|>'
ANSWER = "<|channel|>final<|message|>They hold hands 【3:0†otters.md】 so as not to drift.<|return|>"
RULES = [("<\\|start\\|>file_search.search to=assistant", ANSWER), ("otters", CALL)]


@pytest.fixture(scope="module")
def chat_model() -> ScriptedChatModel:
    return ScriptedChatModel()


@pytest.fixture(scope="module")
def stack(file_search: Service, chat_model: ScriptedChatModel) -> Iterator[tuple[str, ScriptedModel]]:
    """The orchestrator before a scripted Harmony worker and a scripted chat worker (`scripted-chat`)."""
    model = ScriptedModel(Scenario())
    cfg = gateway_config({"file_search": [f"{file_search.url}/mcp"]})
    with (
        running_gateway(cfg) as gateway,
        serve_asgi(build_worker(model)) as worker,
        serve_asgi(build_chat_app(chat_model)) as chat_worker,
        tempfile.TemporaryDirectory(prefix="toolfleet-test-") as scratch,
    ):
        settings = OrchestratorSettings(
            worker_urls=[worker, chat_worker],
            tools_url=gateway.base,
            api_keys=["key-a", "key-b"],
            store_path=f"{scratch}/store.sqlite3",
            files_dir=f"{scratch}/files",
            date="2026-12-02",
        )
        with serve_asgi(create_app(settings, stores=SQLiteStores())) as url:
            yield url, model


def client(url: str, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def store(stack: tuple[str, ScriptedModel]) -> tuple[str, dict[str, str]]:
    """One store of key-a with the three files, indexed: (store id, filename -> file id)."""
    sdk = client(stack[0])
    uploads = {name: sdk.files.create(file=(name, data), purpose="assistants").id for name, data in FACTS.items()}
    created = sdk.vector_stores.create(name="facts", file_ids=list(uploads.values()))
    for file_id in uploads.values():
        done = sdk.vector_stores.files.poll(file_id, vector_store_id=created.id, poll_interval_ms=200)
        assert done.status == "completed", done.last_error
    return created.id, uploads


def tool(store_id: str, **options: Any) -> dict[str, Any]:
    return {"type": "file_search", "vector_store_ids": [store_id], **options}


def test_the_answer_cites_the_file_its_fact_came_from(stack, store) -> None:
    url, model = stack
    model.scenario = scenario(RULES)
    store_id, ids = store
    resp = client(url).responses.create(
        model="gpt-oss", input="Why do otters hold hands?", tools=[tool(store_id)], include=["file_search_call.results"]
    )
    call, message = resp.output
    assert isinstance(call, ResponseFileSearchToolCall)
    ResponseFileSearchToolCall.model_validate(call.model_dump(mode="json", exclude_unset=True), strict=True)
    assert (call.status, call.queries) == ("completed", ["otters sleep"])
    assert call.results and call.results[0].file_id == ids["otters.md"] and call.results[0].filename == "otters.md"
    assert "hold hands" in (call.results[0].text or "") and 0 < (call.results[0].score or 0) <= 1
    text = message.content[0]
    assert text.text == "They hold hands  so as not to drift."
    [citation] = text.annotations
    assert (citation.type, citation.file_id, citation.filename, citation.index) == (
        "file_citation",
        ids["otters.md"],
        "otters.md",
        len("They hold hands "),
    )
    echoed = resp.tools[0].model_dump()
    assert echoed["vector_store_ids"] == [store_id] and echoed["max_num_results"] == 10


def test_streaming_events_validate_and_results_only_when_asked(stack, store) -> None:
    url, model = stack
    model.scenario = scenario(RULES)
    events = list(
        client(url).responses.create(
            model="gpt-oss", input="otters?", tools=[tool(store[0], max_num_results=2)], stream=True
        )
    )
    final = check_stream(events)
    kinds = [e.type for e in events if e.type.startswith("response.file_search_call.")]
    assert kinds == [f"response.file_search_call.{s}" for s in ("in_progress", "searching", "completed")]
    call = final.output[0]
    assert isinstance(call, ResponseFileSearchToolCall) and call.results is None  # not included: not shown
    assert [a.file_id for a in final.output[1].content[0].annotations] == [store[1]["otters.md"]]
    added = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert [e.annotation.type for e in added] == ["file_citation"]  # type: ignore[union-attr]
    assert "【" not in "".join(e.delta for e in events if e.type == "response.output_text.delta")


def test_options_reach_the_server(stack, store) -> None:
    """A filter no file matches leaves nothing to cite; a score threshold keeps only the results above it."""
    url, model = stack
    model.scenario = scenario(RULES)

    def results(**options: Any) -> list[Any]:
        resp = client(url).responses.create(
            model="gpt-oss", input="otters", tools=[tool(store[0], **options)], include=["file_search_call.results"]
        )
        return list(resp.output[0].results or [])

    assert results(filters={"type": "eq", "key": "topic", "value": "none"}) == []
    everything, kept = results(), results(ranking_options={"score_threshold": 0.9})
    assert len(everything) == 3 and 0 < len(kept) < 3 and all((r.score or 0) >= 0.9 for r in kept)
    assert [r.file_id for r in results(max_num_results=1)] == [store[1]["otters.md"]]


def test_tool_choice_file_search_forces_a_call(stack, store) -> None:
    """The stand-in answers directly; the required choice cuts that off and prefills the file_search call."""
    url, model = stack
    direct = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>No.<|return|>"
    forced = 'search <|constrain|>json<|message|>{"queries": ["lava lake"]}<|call|>'
    model.scenario = scenario([(RULES[0][0], ANSWER), ("to=file_search\\.$", forced), ("hi", direct)])
    resp = client(url).responses.create(
        model="gpt-oss", input="hi", tools=[tool(store[0])], tool_choice={"type": "file_search"}
    )
    assert [o.type for o in resp.output] == ["reasoning", "file_search_call", "message"]
    assert resp.output[1].queries == ["lava lake"] and resp.output[1].status == "completed"
    assert "<|channel|>analysis to=file_search." in model.encode_prompt_text(-2)


@pytest.mark.parametrize(
    ("tool_", "param"),
    [
        ({"vector_store_ids": []}, "tools[0].vector_store_ids"),
        ({"vector_store_ids": ["vs_missing"]}, "tools[0].vector_store_ids[0]"),
        ({"max_num_results": 51}, "tools[0].max_num_results"),
        ({"filters": {"type": "in", "key": "a", "value": ["x"]}}, "tools[0].filters"),
        ({"ranking_options": {"hybrid_search": {"embedding_weight": 0, "text_weight": 0}}}, None),
        ({"rewrite_query": True}, "tools[0].rewrite_query"),
    ],
)
def test_bad_tools_are_refused_naming_the_field(stack, store, tool_: dict[str, Any], param: str | None) -> None:
    spec = tool(store[0]) | tool_
    with pytest.raises(openai.APIStatusError) as info:
        client(stack[0]).responses.create(model="gpt-oss", input="hi", tools=[spec])
    error = info.value.body
    assert isinstance(error, dict) and info.value.status_code in (400, 404)
    assert error.get("param") == (param or "tools[0].ranking_options.hybrid_search"), error


def test_another_keys_store_is_missing(stack, store) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client(stack[0], "key-b").responses.create(model="gpt-oss", input="hi", tools=[tool(store[0])])
    assert isinstance(info.value.body, dict) and store[0] in info.value.body["message"]
    assert info.value.body["param"] == "tools[0].vector_store_ids[0]"


AGENT = """
import asyncio, json, os
from openai import AsyncOpenAI
from agents import Agent, FileSearchTool, Runner, set_default_openai_client, set_tracing_disabled
set_tracing_disabled(True)
set_default_openai_client(AsyncOpenAI(base_url=os.environ["BASE_URL"], api_key="key-a", max_retries=0))
agent = Agent(name="a", model="gpt-oss", tools=[FileSearchTool(vector_store_ids=[os.environ["STORE"]],
    include_search_results=True, max_num_results=3)])
result = asyncio.run(Runner.run(agent, "Why do otters hold hands?"))
items = [i.raw_item.model_dump(mode="json") for i in result.new_items]
print(json.dumps({"items": items, "final": result.final_output}))
"""


def test_the_agents_sdk_file_search_tool(stack, store, clients: Clients) -> None:  # noqa: F811
    url, model = stack
    model.scenario = scenario(RULES)
    got = run_python(clients, AGENT, f"{url}/v1", STORE=store[0])
    call, message = got["items"]
    assert call["type"] == "file_search_call" and call["results"][0]["file_id"] == store[1]["otters.md"]
    [citation] = message["content"][0]["annotations"]
    assert citation["file_id"] == store[1]["otters.md"] and got["final"] == "They hold hands  so as not to drift."


def test_the_chat_path_calls_the_same_function_and_cites(stack, store, chat_model: ScriptedChatModel) -> None:
    """A chat-template model is offered the kind's one function (not the server's store-writing tools); its
    call runs the same search and its answer's marker becomes the same file_citation."""
    call = {"name": "file_search_search", "arguments": {"queries": ["otters sleep"]}}
    answer = {"content": "They hold hands 【3:0†otters.md】 so as not to drift."}
    rules = [{"match": "^tool [^:]*: 【3:0", "reply": answer}, {"match": "^user: ", "reply": {"tool_calls": [call]}}]
    chat_model.scenario = ChatScenario.from_dict({"rules": rules})
    resp = client(stack[0]).responses.create(model="scripted-chat", input="otters?", tools=[tool(store[0])])
    offered = [t["function"]["name"] for t in chat_model.requests[-2]["tools"]]
    assert offered == ["file_search_search"]
    assert [o.type for o in resp.output][-2:] == ["file_search_call", "message"]
    assert resp.output[-2].queries == ["otters sleep"]
    [citation] = resp.output[-1].content[0].annotations
    assert (citation.file_id, citation.index) == (store[1]["otters.md"], len("They hold hands "))


def test_an_earlier_file_search_call_sent_back_as_input_is_what_the_model_reads(stack, store) -> None:
    """A client keeping its own history sends the call back: the model reads its queries and results again."""
    url, model = stack
    model.scenario = scenario(RULES)
    sdk = client(url)
    first = sdk.responses.create(
        model="gpt-oss", input="otters?", tools=[tool(store[0])], include=["file_search_call.results"], store=False
    )
    call = first.output[0].model_dump(mode="json", exclude_none=True)  # an answer after it: Harmony drops the call
    model.scenario = scenario([("and\\?", "<|channel|>final<|message|>Seen.<|return|>")])
    again = sdk.responses.create(
        model="gpt-oss", input=[{"role": "user", "content": "otters?"}, call, {"role": "user", "content": "and?"}]
    )
    assert again.output_text == "Seen."
    prompt = model.encode_prompt_text(-1)
    assert "to=file_search.search" in prompt and '{"queries": ["otters sleep"]}' in prompt
    assert "otters.md:\nSea otters hold hands" in prompt
