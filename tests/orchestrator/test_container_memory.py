"""A container's `memory_limit` is its sandboxes' size: the real python and container tools (docker, runc) behind
the real gateway start a container's session with the size the orchestrator asks for, up to the tool server's
`--max-session-memory-mb`; the sandbox's own cgroup says what it got. The scripted worker stands in for the model."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import openai
import pytest

from tests.container.conftest import containers_of, require_docker, server_args
from tests.orchestrator.test_fleet import PY_CALL
from tests.python_sandbox.conftest import require_backend
from tests.support.gateway import gateway_config, running_gateway
from tests.support.service import running_service

CGROUP_FILES = "/sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes"  # cgroup v2, v1
READ_LIMIT = f"import os\nprint([open(p).read().strip() for p in {CGROUP_FILES.split()!r} if os.path.exists(p)][0])"
SHELL_LIMIT = f"cat {CGROUP_FILES} 2>/dev/null"
EXEC = "<|channel|>commentary to=container.exec <|constrain|>json<|message|>{args}<|call|>"
GIB = 2**30


@pytest.fixture(scope="module")
def sized_tools() -> Iterator[str]:
    """A gateway before both sandbox tools, each allowing sessions of up to 4 GiB (their default stays)."""
    require_docker()
    require_backend("docker")
    instance = f"pytest-ctr-mem-{uuid.uuid4().hex[:8]}"
    python = ["-m", "tools.python_sandbox", "--backend", "docker", "--instance", f"{instance}-py", "--pool-size", "1"]
    cap = ["--max-session-memory-mb", "4096"]
    with (
        running_service([*python, *cap]) as py,
        running_service(server_args(instance, *cap)) as ctr,
        running_gateway(gateway_config({"python": [f"{py.url}/mcp"], "container": [f"{ctr.url}/mcp"]})) as gw,
    ):
        yield gw.base
    assert containers_of(instance) == [] and containers_of(f"{instance}-py") == []


@pytest.fixture
def sized(make_stack, sized_tools):
    stack = make_stack(
        tools_url=sized_tools, python_url=None, browser_url=None, container_url=None, max_container_memory="16g"
    )
    stack.script(
        [
            ("(python|container.exec) to=assistant", "<|channel|>final<|message|>ok<|return|>"),
            ("python", PY_CALL.format(code=READ_LIMIT)),
            ("shell", EXEC.format(args=json.dumps({"cmd": ["bash", "-c", SHELL_LIMIT]}))),
        ]
    )
    return stack


def limits(client: openai.OpenAI, box: str) -> tuple[int, int]:
    """The cgroup memory limit that code_interpreter's sandbox and shell's sandbox of the container read."""
    ci = client.responses.create(
        model="gpt-oss",
        input="python",
        tools=[{"type": "code_interpreter", "container": box}],
        include=["code_interpreter_call.outputs"],
    )
    reference = {"type": "shell", "environment": {"type": "container_reference", "container_id": box}}
    shell = client.responses.create(model="gpt-oss", input="shell", tools=[reference])
    return int(ci.output[0].outputs[0].logs), int(shell.output[1].output[0].stdout)


def test_a_4g_container_gets_4_gib_sandboxes_in_both_tools(sized) -> None:
    box = sized.client.containers.create(name="big", memory_limit="4g")
    assert limits(sized.client, box.id) == (4 * GIB, 4 * GIB)
    sized.client.containers.delete(box.id)


def test_a_default_container_keeps_the_tools_own_size(sized) -> None:
    """No size asked: python's `--memory-mb` (1024) and the container tool's (256 in its test flags)."""
    box = sized.client.containers.create(name="plain")
    assert limits(sized.client, box.id) == (GIB, 256 * 2**20)
    sized.client.containers.delete(box.id)


def test_a_container_larger_than_the_tool_allows_is_a_400(sized) -> None:
    """16g passes the API's cap (16g here) but not the tool's 4096 MiB: the request is refused, naming the field,
    and an `auto` container made for it is gone again."""
    client = sized.client
    box = client.containers.create(name="huge", memory_limit="16g")
    for tool, param in [
        ({"type": "code_interpreter", "container": box.id}, "tools[0].container"),
        (
            {"type": "code_interpreter", "container": {"type": "auto", "memory_limit": "16g"}},
            "tools[0].container.memory_limit",
        ),
        (
            {"type": "shell", "environment": {"type": "container_reference", "container_id": box.id}},
            "tools[0].environment.container_id",
        ),
    ]:
        with pytest.raises(openai.BadRequestError, match=r"memory_limit '16g'.*at most 4096 MiB") as refused:
            client.responses.create(model="gpt-oss", input="python", tools=[tool])
        assert refused.value.body["param"] == param
    assert [c.id for c in client.containers.list()] == [box.id]
    client.containers.delete(box.id)
