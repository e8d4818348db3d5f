"""The fleet on a swarm of three nodes: three Docker engines in containers (tests/deploy/nodes.py) joined as one
swarm, the project's images loaded into each, compose.yaml + deploy/swarm.yaml + deploy/swarm-nodes.yaml
deployed by deploy/swarm.sh from the host against the manager's engine.

The core (orchestrator, gateway, Redis, the SCRIPTED worker) runs on the manager, the tools on the two
workers spread by zone: every tool call crosses the overlay network between nodes (VXLAN), and each python
or container replica starts its sandboxes on its own node's engine. Checks: a request per tool; python state
kept by a replica on another node than the gateway's; a worker killed (a lost machine): its tasks come back
on the other worker, a python session it held comes back on the other worker from its last background
snapshot in the stack's Redis (with the restore notice), a session on the other worker keeps its state, the
surviving nodes hold no sandbox of a dead replica; then rolling updates of the python and container tools with
a client calling every tool throughout lose no call and no python or container session (snapshots in the
stack's Redis); `docker stack rm` and the nodes' removal leave nothing. The time from the kill to every tool
answering again is printed (-s).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
from openai.types.responses import Response

from tests.deploy.fleet import DEMO_TOOLS, REPO, Stack, build_images, calls_during, docker, update, wait_for
from tests.deploy.nodes import Cluster, Node, build_node_image, swarm_nodes

pytestmark = pytest.mark.docker
EVERY_TOOL = {"web_search_call", "code_interpreter_call", "mcp_call"}
CORE_IMAGES = ["toolfleet/toolfleet:latest", "toolfleet/redis:latest"]
TOOL_IMAGES = [
    "toolfleet/toolfleet:latest",
    "toolfleet/browser:latest",
    "toolfleet/file-search:latest",
    "toolfleet/python-sandbox:latest",
    "toolfleet/container-sandbox:latest",
]
PYTHON = [{"type": "code_interpreter", "container": {"type": "auto"}}]
CONTAINER = [{"type": "mcp", "server_label": "container", "require_approval": "never"}]
RESTORED = "[restored from a snapshot of "
PORTS = {"python": 8802, "container": 8803}
OWNED = '{{.ID}} {{.Label "toolfleet.owner"}}'


def python_logs(resp: Response) -> str:
    return " ".join(o.logs for item in resp.output if item.type == "code_interpreter_call" for o in item.outputs or [])


@pytest.fixture(scope="module")
def cluster(report: Callable[[str], None]) -> Iterator[Cluster]:
    build_images("all")
    build_node_image()
    with swarm_nodes(3) as nodes:
        t0 = time.monotonic()
        nodes.load({nodes.manager: CORE_IMAGES} | {node: TOOL_IMAGES for node in nodes.workers})
        report(f"\n[swarm-nodes] images loaded into 3 nodes in {time.monotonic() - t0:.0f} s")
        yield nodes
    assert nodes.volumes and nodes.leftovers() == {"containers": [], "networks": [], "volumes": []}


@pytest.fixture(scope="module")
def stack(cluster: Cluster, report: Callable[[str], None]) -> Iterator[Stack]:
    manager = cluster.manager
    env = {
        **manager.env,
        "TOOLFLEET_PORT": "8080",  # published in the manager's own network namespace: no clash with the host's
        "TOOLFLEET_SWARM_FILES": str(REPO / "deploy" / "swarm-nodes.yaml"),
        "DOCKER_GID": docker("exec", manager.name, "stat", "-c", "%g", "/var/run/docker.sock").strip(),
    }
    deployed = Stack(f"tfmn{uuid.uuid4().hex[:6]}", f"http://{manager.ip}:8080", env, manager.docker)
    try:
        t0 = time.monotonic()
        deployed.swarm_sh("deploy")
        healthz = f"{deployed.url}/healthz"
        wait_for("the orchestrator", lambda: httpx.get(healthz, timeout=2).status_code == 200, 240, every_s=2)
        _wait_every_tool(deployed, python=2)
        report(f"\n[swarm-nodes] stack deployed and answering in {time.monotonic() - t0:.0f} s")
        yield deployed
    finally:
        with contextlib.suppress(Exception):
            deployed.swarm_sh("down")


def _wait_every_tool(stack: Stack, python: int) -> None:
    for namespace, count in (("browser", 1), ("python", python), ("container", 1)):
        stack.wait_up(namespace, count, 180)
    # A swarm has no start order: tasks can be up before the gateway has found them by DNS.
    wait_for("every tool answering through the gateway", lambda: EVERY_TOOL <= stack.kinds(), 180, every_s=3)


def sandboxes(node: Node, port: int = PORTS["python"]) -> set[str]:
    """Sandbox containers on a node's engine whose owner is a replica listening on `port`."""
    rows = node.docker("ps", "-a", "--filter", "label=toolfleet.owner", "--format", OWNED)
    return {cid for cid, owner in (row.split() for row in rows.splitlines()) if owner.endswith(f"-{port}")}


def owners(node: Node) -> set[str]:
    """The replicas named as owners by the sandboxes on a node's engine."""
    rows = node.docker("ps", "-a", "--filter", "label=toolfleet.owner", "--format", OWNED)
    return {row.split()[1] for row in rows.splitlines()}


def live_instances(stack: Stack, node: Node) -> set[str]:
    """The sandbox owner names of the python and container replicas running on a node (hostname-port)."""
    return {f"{cid[:12]}-{port}" for service, port in PORTS.items() for cid in stack.tasks(service, node.docker)}


def test_every_tool_answers_with_the_core_on_the_manager_and_the_tools_spread_over_the_workers(cluster, stack) -> None:
    resp = stack.client().responses.create(model="m", input="Run the fleet demo now.", tools=DEMO_TOOLS)
    Response.model_validate(resp.model_dump())
    assert resp.status == "completed" and EVERY_TOOL <= {item.type for item in resp.output}
    assert not any(item.type == "mcp_call" and item.error for item in resp.output)
    assert "demo-checksum" in python_logs(resp)
    assert stack.tasks("gateway") and stack.tasks("orchestrator")  # on the manager
    assert not any(stack.tasks(service) for service in ("browser", "python", "container"))
    per_worker = [len(stack.tasks("python", node.docker)) for node in cluster.workers]
    assert per_worker == [1, 1]  # spread by zone
    # Each python replica's sandboxes live on its own node's engine.
    for node in cluster.workers:
        assert owners(node) and owners(node) <= live_instances(stack, node)


def pinned(stack: Stack) -> set[str]:
    """The python session keys the gateway has pinned (its pin table in the stack's Redis)."""
    redis = stack.tasks("redis")[0]
    raw = stack.engine("exec", redis, "redis-cli", "-n", "0", "--raw", "HKEYS", "toolfleet:gw:pin:python")
    return {key.partition(":")[2] for key in raw.split()}  # "h:<x-session-id>"


def saved_in_background(stack: Stack, session: str) -> bool:
    """Whether a python replica logged a background snapshot of `session`."""
    for line in stack.log_lines("python", '"snapshot.saved"'):
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if session in str(rec.get("session_id")) and rec.get("trigger") == "background":
                return True
    return False


def _session_per_worker(cluster: Cluster, stack: Stack) -> dict[str, tuple[str, Response]]:
    """A python conversation holding state on each worker, with its session key (new sessions go to the replica
    with fewest)."""
    held: dict[str, tuple[str, Response]] = {}
    for _ in range(6):
        before, keys = {node.name: sandboxes(node) for node in cluster.workers}, pinned(stack)
        resp = stack.client().responses.create(model="m", input="please remember a number", tools=PYTHON)
        assert python_logs(resp) == "kept 42"
        # The session took the warm sandbox and the pool made a new one: on the node of the replica.
        (where,) = [node.name for node in cluster.workers if sandboxes(node) - before[node.name]]
        (session,) = pinned(stack) - keys
        held.setdefault(where, (session, resp))
        if len(held) == len(cluster.workers):
            return held
    raise AssertionError(f"sessions only on {sorted(held)}")


def test_a_lost_worker_nodes_sessions_come_back_from_their_snapshots_and_its_tasks_on_the_other(
    cluster, stack, report
) -> None:
    client = stack.client()
    held = _session_per_worker(cluster, stack)
    lost_node, kept_node = cluster.workers[1], cluster.workers[0]
    (lost_session, lost_resp), (_, kept_resp) = held[lost_node.name], held[kept_node.name]
    # State kept across turns by a replica on another node than the gateway's (the manager).
    recall = dict(model="m", input="please recall the number", tools=PYTHON)
    assert python_logs(client.responses.create(previous_response_id=lost_resp.id, **recall)) == "recalled 42"
    # Saved in the background (--snapshot-every-s) after the call that set the variable, off the calls' path.
    wait_for("the lost node's session saved", lambda: saved_in_background(stack, lost_session), 60)
    # A call just before the loss: the gateway's pooled connection to that replica is fresh when the node goes.
    # The node sends no reset; the request written on it next is bounded by the kernel (TCP_USER_TIMEOUT), not
    # by the call's timeout (toolkit.mcpwire.http.UNACKNOWLEDGED_MS).
    assert python_logs(client.responses.create(previous_response_id=lost_resp.id, **recall)) == "recalled 42"

    t0 = time.monotonic()
    docker("kill", lost_node.name)  # a machine lost: every process on it gone at once
    # The gateway places the session on the other worker's replica (restore_lost, deploy/swarm.yaml), which
    # restores it from the stack's Redis and says so: never a silent fresh state, and no "was lost" either.
    logs = python_logs(client.responses.create(previous_response_id=lost_resp.id, **recall))
    assert logs.startswith(RESTORED) and logs.endswith("\nrecalled 42"), logs
    kept = client.responses.create(previous_response_id=kept_resp.id, **recall)
    assert python_logs(kept) == "recalled 42"

    wait_for(
        "the lost node's tasks on the other worker", lambda: len(stack.tasks("python", kept_node.docker)) == 2, 180
    )
    _wait_every_tool(stack, python=2)
    report(f"\n[swarm-nodes] node loss: every tool answering again {time.monotonic() - t0:.0f} s after the kill")
    assert python_logs(client.responses.create(previous_response_id=kept_resp.id, **recall)) == "recalled 42"
    # The surviving nodes hold sandboxes of live replicas only (the lost node's went with it).
    for node in (cluster.manager, kept_node):
        wait_for(f"no orphaned sandbox on {node.name}", lambda n=node: owners(n) <= live_instances(stack, n), 60)


def container_output(resp: Response) -> str:
    return " ".join(f"{i.error or ''}{i.output or ''}" for i in resp.output if i.type == "mcp_call")


def test_rolling_updates_of_python_and_container_across_the_overlay_lose_no_call_and_no_session(stack, report) -> None:
    client = stack.client()
    held = client.responses.create(model="m", input="please remember a number", tools=PYTHON)
    assert python_logs(held) == "kept 42"
    # A container session: a file in /mnt/data and a named shell's exported variable.
    stashed = client.responses.create(model="m", input="please stash a value", tools=CONTAINER)
    assert "stashed" in container_output(stashed), container_output(stashed)
    t0 = time.monotonic()
    outcomes = calls_during(stack, lambda: (update(stack, "python"), update(stack, "container")))
    failed = [o for o in outcomes if o != "ok"]
    report(
        f"\n[swarm-nodes] python and container updated in {time.monotonic() - t0:.0f} s; {len(outcomes)} demo calls"
        f" meanwhile, {len(failed)} lost"
    )
    # A replaced task drains (toolkit.drain): the gateway places no new session on it, and it hands the sessions
    # it holds over as snapshots in the stack's Redis (deploy/swarm.yaml), which a task on either node restores.
    events = ("kernel.died", "janitor.removed", "lease.", "server.drain")
    why = [*stack.log_lines("python", *events), *stack.log_lines("container", *events)] if failed else []
    assert len(outcomes) >= 2 and failed == [], (failed, why)
    recall = {"model": "m", "input": "please recall the number", "tools": PYTHON}
    logs = python_logs(client.responses.create(previous_response_id=held.id, **recall))
    assert logs.startswith(RESTORED) and logs.endswith("\nrecalled 42"), logs
    unstash = {"model": "m", "input": "please unstash it", "tools": CONTAINER}
    shell = container_output(client.responses.create(previous_response_id=stashed.id, **unstash))
    assert shell.startswith(RESTORED) and "unstashed 42 42" in shell, shell


def test_stack_rm_and_the_nodes_removal_leave_nothing(cluster, stack) -> None:
    stack.swarm_sh("down")
    alive = [node for node in cluster.nodes if node.ready()]

    def left() -> dict[str, list[str]]:
        label = f"label=com.docker.stack.namespace={stack.name}"
        return {
            node.name: node.docker("ps", "-aq", "--filter", label).split()
            + node.docker("network", "ls", "-q", "--filter", label).split()
            + sorted(owners(node))
            for node in alive
        }

    nothing = {node.name: [] for node in alive}
    with contextlib.suppress(TimeoutError):
        wait_for("nothing left on the nodes", lambda: left() == nothing, 90)
    assert left() == nothing
    assert cluster.manager.docker("service", "ls", "-q") == ""
