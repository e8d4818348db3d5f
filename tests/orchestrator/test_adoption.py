"""Background responses that outlive their replica: two orchestrator replicas (real subprocesses) on one real
redis-server, the stand-in scripted worker, and the real python tool server (local backend) behind the real
gateway. A replica SIGKILLed mid tool call, or mid answer: the other adopts the response, and a stream
resumes there; with MCP tasks on (the default), the other follows the call's task to its real result, the
code having run once; a cancel through one replica stops the response, its task and the sandbox's process
running on the other."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from conftest import scenario
from invariants import check_stream

from orchestrator.kinds import classify
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.request.schema import ResponsesRequest, Toolset
from orchestrator.responses.adopt import disposition
from orchestrator.responses.events import ResponseBuilder
from orchestrator.responses.journal import Journal
from orchestrator.responses.prepare import _body
from tests.support.asgi import free_port
from tests.support.service import Service, running_service, wait_until

PY_CALL = "<|channel|>analysis to=python<|message|>{code}<|call|>"
TOOLS = [{"type": "code_interpreter"}]
MARKER = f"37.{uuid.uuid4().int % 10**6:06d}"  # the cancelled call's `sleep` process, found by its arguments


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[str]:
    """The python tool server (local backend) behind the gateway; the gateway's URL."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is needed for the python server's local backend")
    py_port = free_port()
    config = tmp_path_factory.mktemp("adopt-gw") / "routes.yaml"
    config.write_text(yaml.safe_dump({"namespaces": {"python": {"replicas": [f"http://127.0.0.1:{py_port}/mcp"]}}}))
    python = ["-m", "tools.python_sandbox", "--backend", "local"]
    with running_service(python, port=py_port), running_service(["-m", "gateway", "--config", str(config)]) as gw:
        yield gw.url


@contextlib.contextmanager
def replicas(scripted: Any, redis_url: str, gateway: str, *more: str) -> Iterator[tuple[Service, Service]]:
    """Two orchestrators sharing one Redis prefix, with a short background hold (3 s: renewed every second, so
    a replica starved of the CPU that long by a busy machine does not lose it)."""
    worker_url, _ = scripted
    flags = ["--store", "redis", "--redis-url", redis_url, "--redis-prefix", f"t{uuid.uuid4().hex[:8]}:", *more]
    flags += ["--worker-urls", f'["{worker_url}"]', "--tools-url", gateway, "--background-hold-s", "3"]
    with running_service(["-m", "orchestrator", *flags]) as a, running_service(["-m", "orchestrator", *flags]) as b:
        yield a, b


def stored(replica: Service, rid: str) -> dict[str, Any]:
    return httpx.get(f"{replica.url}/v1/responses/{rid}", timeout=30).json()


def interpreting(replica: Service, rid: str) -> bool:
    """The python call is running and its events are in the store (the heartbeat wrote them)."""
    output = stored(replica, rid)["output"]
    return bool(output) and output[-1].get("status") == "interpreting"


def sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line.removeprefix("data: "))


def test_a_replica_killed_mid_tool_call_the_other_adopts_it_and_the_stream_resumes_there(scripted, redis_url, gateway):
    scripted[1].scenario = scenario(
        [  # the model is told the call was interrupted (python is not safe to run again unasked)
            ("was interrupted before the tool answered", "<|channel|>final<|message|>It was interrupted.<|return|>"),
            ("long job", PY_CALL.format(code="import time\ntime.sleep(10)\nprint('slept')")),
        ]
    )
    with replicas(scripted, redis_url, gateway, "--tool-task-after-ms", "null") as (doomed, survivor):  # no task
        body = {"input": "long job", "tools": TOOLS, "background": True, "stream": True}
        seen: list[dict[str, Any]] = []
        with httpx.stream("POST", f"{doomed.url}/v1/responses", json=body, timeout=30) as stream:
            events = sse(stream.iter_lines())
            for event in events:
                seen.append(event)
                if event["type"] == "response.code_interpreter_call.interpreting":
                    break
            rid = seen[0]["response"]["id"]
            assert wait_until(lambda: interpreting(survivor, rid))
            doomed.stop(signal.SIGKILL)  # mid-call: no shutdown, only the lapsed hold tells
            with contextlib.suppress(httpx.HTTPError):
                seen += events  # whatever was on its way; then the connection is gone
        url = f"{survivor.url}/v1/responses/{rid}?stream=true&starting_after={seen[-1]['sequence_number']}"
        with httpx.stream("GET", url, timeout=60) as resumed:
            rest = list(sse(resumed.iter_lines()))
        order = [(e["sequence_number"], e["type"]) for e in seen + rest]
        assert [n for n, _ in order] == list(range(len(order))) and order[-1][1] == "response.completed", order
        final = check_stream(seen + rest)  # gapless, no duplicate, every item closed, one terminal event
        assert final.status == "completed" and final.output_text == "It was interrupted."
        call = final.output[0]
        assert call.type == "code_interpreter_call" and call.status == "failed"
        assert stored(survivor, rid)["status"] == "completed"
        assert "response.adopted" in survivor.log() and "response.call_interrupted" in survivor.log()


def test_a_replica_killed_mid_task_the_other_follows_the_task_to_its_result_and_the_code_ran_once(
    scripted, redis_url, gateway
):
    code = "import time\nopen('runs.txt', 'a').write('ran\\n')\ntime.sleep(8)\n"
    code += "print('runs:', open('runs.txt').read().count('ran'))"  # a second run would count two
    scripted[1].scenario = scenario(
        [
            ("runs: 1", "<|channel|>final<|message|>It ran once.<|return|>"),
            ("was interrupted before the tool answered", "<|channel|>final<|message|>It was interrupted.<|return|>"),
            ("task job", PY_CALL.format(code=code)),
        ]
    )
    with replicas(scripted, redis_url, gateway) as (doomed, survivor):
        body = {"input": "task job", "tools": TOOLS, "background": True}
        rid = httpx.post(f"{doomed.url}/v1/responses", json=body, timeout=30).json()["id"]
        assert wait_until(lambda: "tool.task_started" in doomed.log()), stored(survivor, rid)  # id checkpointed
        doomed.stop(signal.SIGKILL)
        assert wait_until(lambda: stored(survivor, rid)["status"] not in ("queued", "in_progress"), timeout_s=60)
        final = stored(survivor, rid)
        assert final["status"] == "completed", final
        call = final["output"][-2]  # the call followed to its task's result, then the answer
        assert call["type"] == "code_interpreter_call" and call["status"] == "completed", final["output"]
        assert call["outputs"] == [{"type": "logs", "logs": "runs: 1"}], call  # the code ran once: one line
        assert final["output"][-1]["content"][0]["text"] == "It ran once."
        assert "response.call_resumed" in survivor.log() and "tool.task_followed" in survivor.log()
        assert "response.call_interrupted" not in survivor.log()


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_a_replica_killed_mid_generation_the_stream_resumed_on_the_other_has_each_stored_word_once(
    scripted, redis_url, gateway
):
    answer = "<|channel|>final<|message|>" + words(80) + "<|return|>"
    scripted[1].scenario = scenario([{"match": "slow answer", "reply": answer, "delay_s": 0.02}])
    with replicas(scripted, redis_url, gateway) as (doomed, survivor):
        body = {"input": "slow answer", "background": True, "stream": True}
        seen: list[dict[str, Any]] = []
        with httpx.stream("POST", f"{doomed.url}/v1/responses", json=body, timeout=30) as stream:
            for event in sse(stream.iter_lines()):
                seen.append(event)
                if sum(e["type"] == "response.output_text.delta" for e in seen) == 10:
                    doomed.stop(signal.SIGKILL)  # mid-answer: what it generated and did not store is gone
                    break
        rid = seen[0]["response"]["id"]
        url = f"{survivor.url}/v1/responses/{rid}?stream=true&starting_after={seen[-1]['sequence_number']}"
        with httpx.stream("GET", url, timeout=60) as resumed:
            rest = list(sse(resumed.iter_lines()))
        everything = seen + rest
        assert [e["sequence_number"] for e in everything] == list(range(len(everything)))
        assert [e["type"] for e in everything].count("response.completed") == 1
        final = check_stream(everything)  # no duplicate, every item closed, one terminal event
        text = "".join(e["delta"] for e in everything if e["type"] == "response.output_text.delta")
        assert text == final.output_text  # no delta the client had was numbered again with other text
        cut, whole = final.output  # the cut message keeps exactly its stored text; the turn generated again
        assert cut.status == "incomplete" and whole.status == "completed" and whole.content[0].text == words(80)
        before_kill = "".join(e["delta"] for e in seen if e["type"] == "response.output_text.delta")
        assert cut.content[0].text.startswith(before_kill) and words(80).startswith(cut.content[0].text)
        assert stored(survivor, rid)["status"] == "completed" and "response.adopted" in survivor.log()


def test_a_cancel_through_one_replica_stops_the_response_and_its_sandbox_process_on_the_other(
    scripted, redis_url, gateway
):
    scripted[1].scenario = scenario(
        [("sleep on", PY_CALL.format(code=f"import subprocess\nsubprocess.run(['sleep', '{MARKER}'])"))]
    )
    with replicas(scripted, redis_url, gateway) as (running, other):
        body = {"input": "sleep on", "tools": TOOLS, "background": True}
        rid = httpx.post(f"{running.url}/v1/responses", json=body, timeout=30).json()["id"]
        assert wait_until(lambda: interpreting(other, rid) and sleeping()), stored(other, rid)
        assert wait_until(lambda: "tool.task_started" in running.log())  # a task after --tool-task-after-ms
        cancelled = httpx.post(f"{other.url}/v1/responses/{rid}/cancel", timeout=30).json()
        assert cancelled["status"] == "cancelled" and cancelled["output"][0]["status"] == "failed"
        assert wait_until(lambda: not sleeping()), "the sandbox's process outlived the cancel"
        assert stored(running, rid)["status"] == "cancelled"
        assert "response.cancelled_elsewhere" in running.log() and "response.adopted" not in other.log()
        assert "tool.task_cancelled" in running.log()  # the call's MCP task, cancelled besides its session


def test_a_response_cancelled_after_its_replica_died_has_its_orphaned_task_cancelled_by_the_adopter(
    scripted, redis_url, gateway
):
    marker = f"{MARKER}1"
    scripted[1].scenario = scenario(
        [("orphan on", PY_CALL.format(code=f"import subprocess\nsubprocess.run(['sleep', '{marker}'])"))]
    )
    with replicas(scripted, redis_url, gateway) as (doomed, other):
        body = {"input": "orphan on", "tools": TOOLS, "background": True}
        rid = httpx.post(f"{doomed.url}/v1/responses", json=body, timeout=30).json()["id"]
        assert wait_until(lambda: "tool.task_started" in doomed.log() and sleeping(marker)), stored(other, rid)
        doomed.stop(signal.SIGKILL)  # the task runs on, its response held by no replica until the hold lapses
        cancelled = httpx.post(f"{other.url}/v1/responses/{rid}/cancel", timeout=30).json()
        assert cancelled["status"] == "cancelled", cancelled
        assert wait_until(lambda: not sleeping(marker)), "the orphaned task's process outlived the cancel"
        assert "tool.task_cancelled" in other.log() and "response.call_resumed" not in other.log()


def sleeping(marker: str = MARKER) -> bool:
    """Whether a cancelled call's `sleep` runs (the host sees the sandbox's processes)."""
    pattern = f"^sleep {marker.replace('.', '[.]')}$"
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


def test_a_restored_builder_ends_the_text_cut_off_with_what_was_written_and_numbers_on_gaplessly():
    before = ResponseBuilder(_body(ResponsesRequest(input="hi", background=True), "resp_1", None, "gpt-oss"))
    before.start(queued=True)
    before.in_progress()
    item = before.add_item(
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    )
    item.event(
        "response.content_part.added", content_index=0, part={"type": "output_text", "text": "", "annotations": []}
    )
    for word in ("Half ", "an answer"):
        item.event("response.output_text.delta", content_index=0, delta=word, logprobs=[])
    adopted = ResponseBuilder.restore(before.snapshot(), before.events)
    adopted.close_open()
    adopted.finish("completed")
    assert adopted.events[: len(before.events)] == before.events
    final = check_stream(adopted.events)
    assert final.output[0].status == "incomplete" and final.output[0].content[0].text == "Half an answer"


async def test_a_write_ahead_builder_shows_an_event_once_stored_and_its_readers_end_once_its_hold_is_taken() -> None:
    stores = SQLiteStores()
    store = stores.responses
    builder = ResponseBuilder(_body(ResponsesRequest(input="hi", background=True), "resp_wa", None, "gpt-oss"))
    await store.hold_running([builder.id], 30, "one")
    journal = Journal(store, builder, "one", 30, window_s=0.01)
    fenced = asyncio.Event()
    builder.start(queued=True)
    reader = builder.follow()
    assert builder.visible == 0  # emitted, not stored: no reader has them
    journal.start(fenced.set)
    first = await anext(reader)
    assert first["type"] == "response.created" and await store.events(builder.id, -1) == builder.events[:2]
    await anext(reader)
    await store.release_running(builder.id, "one")
    await store.hold_running([builder.id], 30, "two")  # another replica adopted it
    builder.in_progress()
    await fenced.wait()
    assert journal.fenced and builder.visible == 2 and len(await store.events(builder.id, -1)) == 2
    assert not await journal.close()  # the last event was never stored, nor shown
    builder.leave()  # as settling a response another replica goes on with does
    with pytest.raises(StopAsyncIteration):  # its reader ends at what was stored, to resume elsewhere
        await anext(reader)
    await stores.aclose()


def test_only_a_call_its_kind_declares_safe_to_repeat_is_run_again():
    tools = Toolset(builtins={"browser": {}, "python": {}})
    for recipient, becomes in [("browser.search", "rerun"), ("browser.open", "rerun"), ("python", "interrupt")]:
        kind, _, fn = classify(tools, recipient)
        assert kind is not None and disposition(kind, fn) == becomes, recipient
    assert disposition(None, "search") == "interrupt"  # no tool of the request: nothing to run again
    python, _, fn = classify(tools, "python")
    assert disposition(python, fn, task=True) == "resume"  # its MCP task id was checkpointed: followed
    assert disposition(None, "python", task=True) == "interrupt"
