"""The compose fleet with its `vllm` profile: a real vLLM CPU worker *container* (the tiny gpt-oss model with
random weights) behind the orchestrator. Its text is gibberish; what is checked is that every request,
one per tool and one streamed, comes back well-formed through the openai SDK.
"""

from __future__ import annotations

import subprocess

import pytest
from openai.types.responses import Response

from tests.deploy.fleet import DEMO_TOOLS, build_images, compose_fleet, docker, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def no_other_vllm() -> bool:
    """vLLM costs ~4.5 GB: wait while another one runs on this shared machine."""
    return subprocess.run(["pgrep", "-f", "vllm.entrypoints.openai.api_server"], capture_output=True).returncode != 0


@pytest.fixture(scope="module")
def fleet():
    build_images("all", "vllm")
    wait_for("no other vLLM running", no_other_vllm, 900, every_s=5)
    with compose_fleet(profile="vllm", env={"TOOLFLEET_WORKER_URLS": '["http://vllm:8000"]'}) as running:
        (vllm,) = running.containers("vllm")
        wait_for(
            "vLLM healthy",
            lambda: docker("inspect", "-f", "{{.State.Health.Status}}", vllm).strip() == "healthy",
            300,
            every_s=3,
        )
        yield running


@pytest.mark.parametrize("tool", DEMO_TOOLS, ids=lambda t: t["type"])
def test_a_request_with_each_tool_is_well_formed_from_the_real_worker(fleet, tool) -> None:
    client = fleet.openai()
    model = client.models.list().data[0].id
    assert model == "/opt/model"  # the vLLM container's model, not the scripted worker's
    resp = client.responses.create(
        model=model, input="Use the tool, then answer.", tools=[tool], max_output_tokens=48, temperature=0
    )
    Response.model_validate(resp.model_dump())
    assert resp.status in ("completed", "incomplete") and resp.usage.output_tokens > 0


def test_a_streamed_request_ends_in_one_terminal_event(fleet) -> None:
    client = fleet.openai()
    events = list(
        client.responses.create(
            model="/opt/model", input="Say hi.", tools=DEMO_TOOLS, stream=True, max_output_tokens=32, temperature=0
        )
    )
    assert events[0].type == "response.created"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    terminal = [e for e in events if e.type in ("response.completed", "response.incomplete", "response.failed")]
    assert len(terminal) == 1 and terminal[0] is events[-1] and events[-1].type != "response.failed"
