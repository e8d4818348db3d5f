"""Drive the real compose fleet from tests: a unique project, an ephemeral published port, and a full teardown.

    with compose_fleet(scale={"python": 2}) as fleet:
        client = fleet.openai()           # the openai SDK against the published orchestrator
        fleet.compose("up", "-d", "--scale", "python=3", "--no-recreate")
        fleet.gateway_status()            # the gateway's replicas (/admin/status, from loopback in its container)

    stack = Stack("tfsw1234", "http://127.0.0.1:8080", env)   # a swarm stack by deploy/swarm.sh
    stack.swarm_sh("up"); stack.wait_up("python", 2); stack.client()

Every resource the project makes is named or labelled by it, so the checks of what is left behind look at
this project only (other engineers' containers run on the same engine).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
from openai.types.responses import Response

REPO = Path(__file__).resolve().parents[2]
DEMO_TOOLS = [
    {"type": "web_search_preview"},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "mcp", "server_label": "container", "require_approval": "never"},
]


def docker(*args: str, check: bool = True, timeout: float = 120) -> str:
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def build_images(*targets: str) -> None:
    """deploy/build-images.sh (cached: seconds when the demo or an earlier test built them)."""
    subprocess.run(["bash", str(REPO / "deploy" / "build-images.sh"), *targets], check=True, timeout=1800)


def wait_for(what: str, probe: Callable[[], object], timeout_s: float, every_s: float = 1.0) -> object:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            last = probe()
            if last:
                return last
        time.sleep(every_s)
    raise TimeoutError(f"{what} not reached in {timeout_s:.0f} s (last: {last!r})")


@dataclass
class Fleet:
    project: str
    env: dict[str, str]
    instances: set[str] = field(default_factory=set)  # sandbox owner names seen (python/container replicas)
    volumes: set[str] = field(default_factory=set)

    def compose(self, *args: str, timeout: float = 300) -> str:
        cmd = ["docker-compose", "-p", self.project, *args]
        out = subprocess.run(cmd, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
        return out.stdout

    def containers(self, service: str) -> list[str]:
        return self.compose("ps", "-q", service).split()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.compose('port', 'orchestrator', '8080').strip().rsplit(':', 1)[1]}"

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url()}/v1", api_key="unused", max_retries=0, timeout=300)

    def exec_python(self, service: str, code: str) -> str:
        return docker("exec", self.containers(service)[0], "python", "-c", code)

    def gateway_status(self) -> dict:
        code = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8800/admin/status').read().decode())"
        return json.loads(self.exec_python("gateway", code))

    def up_replicas(self, namespace: str) -> list[str]:
        replicas = self.gateway_status()["namespaces"][namespace]["replicas"]
        return sorted(url for url, state in replicas.items() if state == "up")

    def wait_replicas(self, namespace: str, count: int, timeout_s: float = 60) -> list[str]:
        return wait_for(
            f"{count} {namespace} replicas up",
            lambda: len(self.up_replicas(namespace)) == count and self.up_replicas(namespace),
            timeout_s,
        )  # type: ignore[return-value]

    def remember_owners(self) -> None:
        """Note the sandbox owners and volumes of the running replicas, to check they are gone after `down`."""
        for service in ("python", "container"):
            for cid in self.containers(service):
                port = {"python": 8802, "container": 8803}[service]
                self.instances.add(f"{cid[:12]}-{port}")
        for cid in self.containers("browser"):
            mounts = json.loads(docker("inspect", "-f", "{{json .Mounts}}", cid))
            self.volumes |= {m["Name"] for m in mounts if m["Type"] == "volume"}

    def leftovers(self) -> dict[str, list[str]]:
        label = f"label=com.docker.compose.project={self.project}"
        owned = [f"label=toolfleet.owner={i}" for i in self.instances] + [
            f"label=toolfleet.lease={i}" for i in self.instances
        ]
        sandboxes = {c for f in owned for c in docker("ps", "-aq", "--filter", f).split()}
        volumes = set(docker("volume", "ls", "-q").split())
        return {
            "containers": docker("ps", "-aq", "--filter", label).split(),
            "networks": docker("network", "ls", "-q", "--filter", label).split(),
            "volumes": docker("volume", "ls", "-q", "--filter", label).split() + sorted(self.volumes & volumes),
            "sandboxes": sorted(sandboxes),
        }

    def down(self) -> None:
        self.remember_owners()
        self.compose("down", "-v", "--remove-orphans", "-t", "30", timeout=300)


@contextlib.contextmanager
def compose_fleet(
    *,
    scale: dict[str, int] | None = None,
    profile: str | None = None,
    env: dict[str, str] | None = None,
    wait_s: float = 180,
) -> Iterator[Fleet]:
    project = f"tfe2e{uuid.uuid4().hex[:8]}"
    full_env = {**os.environ, "TOOLFLEET_PORT": "", "DOCKER_GID": str(os.stat("/var/run/docker.sock").st_gid)}
    fleet = Fleet(project, {**full_env, **(env or {})})
    args = [*(["--profile", profile] if profile else []), "up", "-d"]
    args += [arg for name, n in (scale or {}).items() for arg in ("--scale", f"{name}={n}")]
    try:
        fleet.compose(*args)
        wait_for("the orchestrator", lambda: httpx.get(f"{fleet.url()}/healthz", timeout=2).status_code == 200, wait_s)
        yield fleet
    except Exception:
        with contextlib.suppress(Exception):
            print(fleet.compose("logs", "--tail", "30")[-8000:])
        raise
    finally:
        with contextlib.suppress(Exception):
            fleet.down()


@dataclass
class Stack:
    """A stack deployed by deploy/swarm.sh; `engine` is the docker CLI of the manager (a node's, on a swarm of
    several) and `env` what swarm.sh runs with (TOOLFLEET_PORT, DOCKER_HOST, ...)."""

    name: str
    url: str  # the orchestrator's published address
    env: dict[str, str]
    engine: Callable[..., str] = docker

    def swarm_sh(self, action: str) -> None:
        script = ["bash", str(REPO / "deploy" / "swarm.sh"), action, self.name]
        out = subprocess.run(script, env=self.env, cwd=REPO, timeout=600, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"deploy/swarm.sh {action} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")

    def tasks(self, service: str, engine: Callable[..., str] | None = None) -> list[str]:
        """Running containers of a service's tasks on one engine (the manager's unless named)."""
        label = f"label=com.docker.swarm.service.name={self.name}_{service}"
        return (engine or self.engine)("ps", "-q", "--filter", label, "--filter", "status=running").split()

    def log_lines(self, service: str, *events: str) -> list[str]:
        """A service's log lines (all its tasks, old ones too) that name one of `events`: what a failure shows."""
        argv = ["docker", "service", "logs", "--raw", f"{self.name}_{service}"]
        # the services log to stderr
        out = subprocess.run(
            argv, env=self.env, text=True, timeout=60, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        ).stdout
        return [line[:600] for line in out.splitlines() if any(event in line for event in events)]

    def gateway_status(self) -> dict:
        code = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8800/admin/status').read().decode())"
        return json.loads(self.engine("exec", self.tasks("gateway")[0], "python", "-c", code))

    def up(self, namespace: str) -> list[str]:
        replicas = self.gateway_status()["namespaces"][namespace]["replicas"]
        return sorted(u for u, state in replicas.items() if state == "up")

    def wait_up(self, namespace: str, count: int, timeout_s: float = 120) -> None:
        wait_for(f"{count} {namespace} replicas", lambda: len(self.up(namespace)) == count, timeout_s)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, timeout=120)

    def kinds(self) -> set[str]:
        """The output item types of one demo request that answered without a tool error."""
        resp = self.client().responses.create(model="m", input="Run the fleet demo now.", tools=DEMO_TOOLS)
        return {item.type for item in resp.output if item.type != "mcp_call" or not item.error}


def every_tool_answered(resp: Response) -> str:
    """ "ok" for a demo response in which browser, python and container each answered without an error, else
    what went wrong (for the assertion's message)."""
    logs = " ".join(o.logs for i in resp.output if i.type == "code_interpreter_call" for o in i.outputs or [])
    errors = [f"{i.name}: {i.error}" for i in resp.output if i.type == "mcp_call" and i.error]
    errors += [f"search {i.status}" for i in resp.output if i.type == "web_search_call" and i.status != "completed"]
    errors += [] if "demo-checksum" in logs else [f"python: {logs[:300]}"]
    kinds = {item.type for item in resp.output}
    missing = {"web_search_call", "code_interpreter_call", "mcp_call"} - kinds
    errors += [f"status {resp.status}"] if resp.status != "completed" else []
    errors += [f"no {sorted(missing)}"] if missing else []
    return "; ".join(errors) or "ok"


def outcomes_of(stack: Stack, count: int) -> list[str]:
    """`count` demo requests, each "ok" when every tool answered (else what went wrong)."""
    client = stack.client()
    demo = {"model": "m", "input": "Run the fleet demo now.", "tools": DEMO_TOOLS}
    return [every_tool_answered(client.responses.create(**demo)) for _ in range(count)]


def calls_during(stack: Stack, work: Callable[[], None]) -> list[str]:
    """Demo requests one after another for as long as `work` runs; each one's outcome (`every_tool_answered`)."""
    outcomes: list[str] = []
    done = threading.Event()

    def call() -> None:
        while not done.is_set():
            outcomes.extend(outcomes_of(stack, 1))

    caller = threading.Thread(target=call)
    caller.start()
    try:
        work()
    finally:
        done.set()
        caller.join()
    return outcomes


def update(stack: Stack, service: str) -> None:
    """A rolling update of one service (deploy/swarm.yaml: start-first, one task at a time), until it is done."""
    stack.engine("service", "update", "--force", "--detach=false", f"{stack.name}_{service}", timeout=400)
