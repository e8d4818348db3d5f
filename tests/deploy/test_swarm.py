"""The same fleet on a swarm (single node): `docker stack deploy` of compose.yaml + deploy/swarm.yaml.

Checks a request per tool through the openai SDK, scaling a tool with `docker service scale` (the gateway
finds `tasks.NAME`), a rolling start-first update of every tool, one after the other, with a client calling
every tool throughout and losing no call (one tool's update leaves a session held by another tool's replica
working), a crashed replica restarted by the swarm, and `docker stack rm` leaving no service, container,
network or sandbox behind.

`docker swarm init` is global to the engine: the test initialises a swarm only when the engine is not in
one, and then leaves it at the end; on an engine already in a swarm it deploys its stack and leaves the
swarm alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from dataclasses import dataclass, field

import httpx
import pytest
from openai.types.responses import Response

from tests.deploy.fleet import DEMO_TOOLS, Stack, build_images, calls_during, docker, outcomes_of, update, wait_for
from tests.support.asgi import free_port

pytestmark = pytest.mark.docker
COMPUTE = {"input": "please compute 6*7", "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}
SEARCH = {"input": "please search for tea", "tools": [{"type": "web_search_preview"}]}
CONTAINER = [{"type": "mcp", "server_label": "container", "require_approval": "never"}]


@dataclass
class Swarm1(Stack):
    """The stack on this engine, a single-node swarm; remembers its sandbox owners to check they go."""

    instances: set[str] = field(default_factory=set)

    def remember_owners(self) -> None:
        for service, port in (("python", 8802), ("container", 8803)):
            self.instances |= {f"{cid[:12]}-{port}" for cid in self.tasks(service)}

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.stack.namespace={self.name}"
        owned = [f"label=toolfleet.{kind}={i}" for i in self.instances for kind in ("owner", "lease")]
        return {
            "services": docker("service", "ls", "-q", "--filter", label).split(),
            "containers": docker("ps", "-aq", "--filter", label).split(),
            "networks": docker("network", "ls", "-q", "--filter", label).split(),
            "sandboxes": sorted({c for f in owned for c in docker("ps", "-aq", "--filter", f).split()}),
        }


@pytest.fixture(scope="module")
def swarm():
    build_images("all")
    joined = docker("info", "-f", "{{.Swarm.LocalNodeState}}").strip() != "active"
    if joined:
        docker("swarm", "init", "--advertise-addr", "127.0.0.1")
    try:
        yield
    finally:
        if joined:
            docker("swarm", "leave", "--force", check=False)


@pytest.fixture(scope="module")
def stack(swarm):
    port = free_port()
    env = {**os.environ, "TOOLFLEET_PORT": str(port)}
    deployed = Swarm1(f"tfsw{uuid.uuid4().hex[:8]}", f"http://127.0.0.1:{port}", env)
    try:
        deployed.swarm_sh("up")
        url = f"{deployed.url}/healthz"
        wait_for("the orchestrator", lambda: httpx.get(url, timeout=2).status_code == 200, 240, every_s=2)
        for namespace, count in (("browser", 1), ("python", 2), ("container", 1)):
            deployed.wait_up(namespace, count, 180)
        # A swarm has no start order: tasks can be up before the gateway has found them by DNS.
        wait_for("every tool answering through the gateway", lambda: EVERY_TOOL <= deployed.kinds(), 180, every_s=3)
        yield deployed
    finally:
        with contextlib.suppress(Exception):
            deployed.remember_owners()
        with contextlib.suppress(Exception):
            deployed.swarm_sh("down")
        # swarm.sh down keeps a stack's named volumes (the orchestrator's files), as compose's down does without
        # -v; the test's own go with it (each run left one behind)
        label = f"label=com.docker.stack.namespace={deployed.name}"
        for volume in docker("volume", "ls", "-q", "--filter", label).split():
            with contextlib.suppress(Exception):
                docker("volume", "rm", volume)


EVERY_TOOL = {"web_search_call", "code_interpreter_call", "mcp_call"}


def test_a_request_using_each_tool_is_answered_on_the_swarm(stack) -> None:
    resp = stack.client().responses.create(model="m", input="Run the fleet demo now.", tools=DEMO_TOOLS)
    Response.model_validate(resp.model_dump())
    kinds = {item.type for item in resp.output}
    assert resp.status == "completed" and EVERY_TOOL <= kinds
    assert not any(item.type == "mcp_call" and item.error for item in resp.output)


def test_a_tool_scales_with_docker_service_scale(stack) -> None:
    docker("service", "scale", "--detach", f"{stack.name}_browser=2")
    stack.wait_up("browser", 2)
    for _ in range(2):
        assert stack.client().responses.create(model="m", **SEARCH).output[0].status == "completed"
    stack.remember_owners()
    docker("service", "scale", "--detach", f"{stack.name}_browser=1")
    stack.wait_up("browser", 1)
    assert stack.client().responses.create(model="m", **SEARCH).output[0].status == "completed"


def python_logs(resp: Response) -> list[str]:
    return [o.logs for i in resp.output if i.type == "code_interpreter_call" for o in i.outputs or []]


def container_output(resp: Response) -> str:
    return " ".join(f"{i.error or ''}{i.output or ''}" for i in resp.output if i.type == "mcp_call")


def test_a_rolling_update_of_every_tool_loses_no_call_and_no_session(stack) -> None:
    client = stack.client()
    held = client.responses.create(model="m", input="please remember a number", tools=COMPUTE["tools"])
    assert python_logs(held) == ["kept 42"]  # a python session, pinned to one replica
    # A container session: a file in /mnt/data and a named shell's exported variable.
    stashed = client.responses.create(model="m", input="please stash a value", tools=CONTAINER)
    assert "stashed" in container_output(stashed), container_output(stashed)
    unstash = {"model": "m", "input": "please unstash it", "tools": CONTAINER, "previous_response_id": stashed.id}
    recall = {"model": "m", "input": "please recall the number", "tools": COMPUTE["tools"]}
    after: list[Response] = []

    def browser_then_the_others() -> None:
        update(stack, "browser")
        # One tool's update leaves the sessions other tools' replicas hold alone.
        assert python_logs(client.responses.create(previous_response_id=held.id, **recall)) == ["recalled 42"]
        update(stack, "python")
        after.append(client.responses.create(previous_response_id=held.id, **recall))
        update(stack, "container")
        after.append(client.responses.create(**unstash))

    outcomes = calls_during(stack, browser_then_the_others)
    # A replaced task drains on SIGTERM (toolkit.drain): it takes no new session (the gateway places them on
    # another replica) and hands the sessions it holds over as snapshots in the stack's Redis (deploy/swarm.yaml);
    # their next call lands on another replica, which restores them: no call, no python and no container state
    # (the file and the named shell's export) is lost.
    assert len(outcomes) >= 3 and [o for o in outcomes if o != "ok"] == [], outcomes
    (logs,) = python_logs(after[0])
    assert logs.startswith("[restored from a snapshot of ") and logs.endswith("\nrecalled 42"), logs
    shell = container_output(after[1])
    assert shell.startswith("[restored from a snapshot of ") and "unstashed 42 42" in shell, shell
    stack.wait_up("python", 2)
    assert outcomes_of(stack, 2) == ["ok", "ok"]


def test_a_crashed_replica_is_restarted_by_the_swarm(stack) -> None:
    stack.remember_owners()
    victim = stack.tasks("python")[0]
    os.kill(int(docker("inspect", "-f", "{{.State.Pid}}", victim)), signal.SIGKILL)
    wait_for("a new python task", lambda: len(stack.tasks("python")) == 2 and victim not in stack.tasks("python"), 120)
    stack.remember_owners()
    stack.wait_up("python", 2)
    resp = stack.client().responses.create(model="m", **COMPUTE)
    assert [o.logs for i in resp.output if i.type == "code_interpreter_call" for o in i.outputs] == ["42"]
    # The new task has a new name: the dead replica's sandboxes go when a live replica sees its lease expire.
    orphans = f"label=toolfleet.owner={victim[:12]}-8802"
    wait_for("the dead replica's sandboxes reaped", lambda: not docker("ps", "-aq", "--filter", orphans).strip(), 150)


def test_stack_rm_leaves_no_service_container_network_or_sandbox(stack) -> None:
    stack.remember_owners()
    stack.swarm_sh("down")
    nothing = {"services": [], "containers": [], "networks": [], "sandboxes": []}
    with contextlib.suppress(TimeoutError):
        wait_for("nothing left", lambda: stack.leftovers() == nothing, 90)
    assert stack.leftovers() == nothing
