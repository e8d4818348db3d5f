"""End to end: the compose fleet built from this tree, driven through the openai SDK like a client would.

Builds the images, starts compose.yaml under a project of its own with two python replicas and an
ephemeral published port, and checks: one Responses request using browser, python and container; a python
replica killed mid-session loses that session with an error naming it while the other replica's session
goes on; a tool scaled up and down with no config edit; `down -v` leaving no container, network, volume
or sandbox behind. The worker is the SCRIPTED stand-in (orchestrator/worker/scenarios/demo.yaml); the
real vLLM worker container runs in test_vllm_profile.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal

import pytest
from openai.types.responses import Response

from tests.deploy.fleet import DEMO_TOOLS, build_images, compose_fleet, docker, wait_for

pytestmark = pytest.mark.docker
COMPUTE = [{"type": "code_interpreter", "container": {"type": "auto"}}]


@pytest.fixture(scope="module")
def fleet():
    build_images("all")
    with compose_fleet(scale={"python": 2}) as running:
        running.wait_replicas("python", 2)
        yield running


def python_logs(resp: Response) -> str:
    return " ".join(o.logs for item in resp.output if item.type == "code_interpreter_call" for o in item.outputs or [])


def test_one_request_uses_browser_python_and_container_through_the_openai_sdk(fleet) -> None:
    client = fleet.openai()
    resp = client.responses.create(
        model=client.models.list().data[0].id, input="Run the fleet demo now.", tools=DEMO_TOOLS
    )
    Response.model_validate(resp.model_dump())
    kinds = [item.type for item in resp.output]
    assert resp.status == "completed" and {"web_search_call", "code_interpreter_call", "mcp_call"} <= set(kinds)
    searches = [item.action.type for item in resp.output if item.type == "web_search_call"]
    assert searches == ["search", "open_page"]  # the corpus baked into the browser image answered
    assert "demo-checksum" in python_logs(resp)  # a real sandbox ran the code
    shell = next(item for item in resp.output if item.type == "mcp_call")
    assert shell.error is None and "uid=1000" in shell.output and "[exit code 0]" in shell.output
    citation = resp.output[-1].content[0].annotations[0]
    assert citation.type == "url_citation" and citation.url.startswith("corpus://local/")


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_the_default_fleet_serves_chat_completions_whole_and_streamed_with_a_tool_call(fleet) -> None:
    """The default path of LangChain and LiteLLM: chat completions, answered by the SCRIPTED Harmony stand-in
    (tests/clients/test_readme.py runs those clients themselves against the same worker command)."""
    client = fleet.openai()
    hello = client.chat.completions.create(model="scripted-gpt-oss", messages=[{"role": "user", "content": "Hello!"}])
    assert hello.choices[0].message.content == "Hello from the scripted worker." and hello.usage.completion_tokens > 0
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    chunks = list(
        client.chat.completions.create(
            model="scripted-gpt-oss",
            messages=weather,
            tools=[WEATHER],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert calls[0].function.name == "get_weather"
    assert "".join(call.function.arguments or "" for call in calls) == '{"city": "Paris"}'
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def _pins(fleet) -> dict[str, str]:
    """The gateway's session pins for python (session id -> replica URL), read from the fleet's Redis."""
    raw = docker(
        "exec", fleet.containers("redis")[0], "redis-cli", "-n", "0", "--raw", "HGETALL", "toolfleet:gw:pin:python"
    )
    items = raw.splitlines()
    # keys are "h:<x-session-id>" (a header-named session)
    return {k.partition(":")[2]: json.loads(v)["replica"] for k, v in zip(items[::2], items[1::2], strict=True)}


def _replica_container(fleet, url: str) -> str:
    for cid in fleet.containers("python"):
        nets = json.loads(docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", cid))
        if any(f"//{net['IPAddress']}:" in url for net in nets.values()):
            return cid
    raise LookupError(url)


def test_a_killed_python_replica_loses_only_its_sessions_with_an_error_naming_them(fleet) -> None:
    client = fleet.openai()
    by_replica: dict[str, tuple[str, Response]] = {}
    for _ in range(6):  # new sessions go to the replica holding fewest: two or three conversations suffice
        before = set(_pins(fleet))
        resp = client.responses.create(model="m", input="please compute 6*7", tools=COMPUTE)
        assert python_logs(resp) == "42"
        (session,) = set(_pins(fleet)) - before
        by_replica.setdefault(_pins(fleet)[session], (session, resp))
        if len(by_replica) == 2:
            break
    (lost_url, (lost_session, lost_resp)), (kept_url, (_, kept_resp)) = sorted(by_replica.items())
    # SIGKILL to the replica's process from the host: a crash, as the engine sees it (`docker kill` would count
    # as an operator's stop, which the restart policy leaves alone).
    os.kill(int(docker("inspect", "-f", "{{.State.Pid}}", _replica_container(fleet, lost_url))), signal.SIGKILL)

    again = dict(model="m", input="please compute 6*7 again", tools=COMPUTE)
    lost = client.responses.create(previous_response_id=lost_resp.id, **again)
    assert f"session {lost_session!r} was lost" in python_logs(lost) and "went away" in python_logs(lost)
    kept = client.responses.create(previous_response_id=kept_resp.id, **again)
    assert python_logs(kept) == "42"
    # The engine restarts the killed replica (restart: unless-stopped); new sessions are served again.
    fleet.wait_replicas("python", 2, timeout_s=90)
    assert python_logs(client.responses.create(model="m", input="please compute 6*7", tools=COMPUTE)) == "42"
    assert kept_url in fleet.up_replicas("python")


def test_a_tool_scales_up_and_down_with_no_config_edit(fleet) -> None:
    client = fleet.openai()
    fleet.compose("up", "-d", "--no-recreate", "--scale", "python=2", "--scale", "browser=3")
    assert len(fleet.wait_replicas("browser", 3)) == 3
    for _ in range(3):  # each search is a new session: they spread over the replicas
        resp = client.responses.create(model="m", input="please search for tea", tools=[{"type": "web_search_preview"}])
        assert resp.status == "completed" and resp.output[0].type == "web_search_call"
    fleet.remember_owners()
    fleet.compose("up", "-d", "--no-recreate", "--scale", "python=2", "--scale", "browser=1")
    assert len(fleet.wait_replicas("browser", 1)) == 1
    resp = client.responses.create(model="m", input="please search for tea", tools=[{"type": "web_search_preview"}])
    assert resp.output[0].status == "completed"


def test_down_leaves_no_container_network_volume_or_sandbox(fleet) -> None:
    fleet.down()
    nothing = {"containers": [], "networks": [], "volumes": [], "sandboxes": []}
    with contextlib.suppress(TimeoutError):  # sandboxes go as their servers stop; give them a moment
        wait_for("nothing left", lambda: fleet.leftovers() == nothing, 60)
    assert fleet.leftovers() == nothing
