"""Docker engines in containers, joined as one swarm: a cluster of several nodes on one machine, for tests.

    with swarm_nodes(3) as cluster:          # cluster.manager, cluster.workers
        cluster.load({node: ["toolfleet/toolfleet:latest"] for node in cluster.nodes})
        cluster.manager.docker("node", "ls")

Each node is a container of toolfleet/swarm-node (deploy/swarm-node) with its own dockerd and storage (an
anonymous volume), on a private internal bridge made for the cluster; the host reaches a node's engine
through a socket in a directory the test made (no TCP port). Everything is labelled with the cluster's run id;
nodes go with `docker rm -f -v`, which takes their storage, and what they ran, with them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.fleet import REPO, docker, wait_for

NODE_IMAGE = "toolfleet/swarm-node:latest"
BASE = os.environ.get("BASE", "python:3.11-slim-bookworm")
# What a nested engine needs on these hosts: --privileged fails ("unable to apply caps": the bounding set lacks
# CAP_SYS_RESOURCE), so every other capability, no seccomp/AppArmor filter, writable /proc and /sys paths and
# every device node; the entrypoint remounts /sys and the cgroup hierarchies read-write.
NODE_OPTIONS = [
    *("--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE"),
    *("--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"),
    *("--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm"),
]


def build_node_image() -> None:
    """The node image from the fleet's base image (cached by docker's layer cache after the first build)."""
    build = ["docker", "build", "-q", "--network", "host", "--build-arg", f"BASE={BASE}", "-t", NODE_IMAGE]
    subprocess.run([*build, str(REPO / "deploy" / "swarm-node")], check=True, capture_output=True, timeout=900)


@dataclass(frozen=True)
class Node:
    name: str
    sockets: Path  # bind-mounted at /node: the node's dockerd listens on /node/docker.sock too

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.sockets / 'docker.sock'}"}

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        """The docker CLI against this node's engine."""
        out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and out.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} on {self.name} failed: {out.stderr.strip()}")
        return out.stdout

    @property
    def ip(self) -> str:
        return docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", self.name).strip()

    def ready(self) -> bool:
        return self.docker("info", "-f", "{{.ServerVersion}}", check=False).strip() != ""


@dataclass
class Cluster:
    run: str
    nodes: list[Node] = field(default_factory=list)
    volumes: set[str] = field(default_factory=set)  # the nodes' storage (anonymous volumes)

    @property
    def label(self) -> str:
        return f"toolfleet.test=swarm-nodes-{self.run}"

    @property
    def manager(self) -> Node:
        return self.nodes[0]

    @property
    def workers(self) -> list[Node]:
        return self.nodes[1:]

    def load(self, images: dict[Node, list[str]]) -> None:
        """`docker save | docker load` of each node's images, all nodes at once (no registry here)."""
        running = []
        for node, names in images.items():
            save = subprocess.Popen(["docker", "save", *names], stdout=subprocess.PIPE)
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
            load = subprocess.Popen(["docker", "load", "-q"], stdin=save.stdout, env=node.env, **quiet)
            assert save.stdout is not None
            save.stdout.close()  # the load holds the pipe now: a failed load ends the save
            running.append((node, save, load))
        for node, save, load in running:
            _, err = load.communicate(timeout=900)
            if save.wait(timeout=60) != 0 or load.returncode != 0:
                raise RuntimeError(f"loading images into {node.name} failed: {err.decode()[-2000:]}")

    def leftovers(self) -> dict[str, list[str]]:
        """What the host still holds of this cluster (the nodes' storage volumes are anonymous: by name)."""
        label = f"label={self.label}"
        return {
            "containers": docker("ps", "-aq", "--filter", label).split(),
            "networks": docker("network", "ls", "-q", "--filter", label).split(),
            "volumes": sorted(self.volumes & set(docker("volume", "ls", "-q").split())),
        }


def _start(cluster: Cluster, index: int, network: str, scratch: Path) -> Node:
    node = Node(f"tfnode-{cluster.run}-{index}", scratch / str(index))
    node.sockets.mkdir()
    where = ["--name", node.name, "--hostname", node.name, "--label", cluster.label, "--network", network]
    docker(
        "run", "-d", *where, *NODE_OPTIONS, "-v", f"{node.sockets}:/node", NODE_IMAGE, "-H", "unix:///node/docker.sock"
    )
    cluster.nodes.append(node)
    mounts = docker("inspect", "-f", '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}} {{end}}{{end}}', node.name)
    cluster.volumes |= set(mounts.split())
    return node


def _join(cluster: Cluster) -> None:
    """The first node initialises the swarm, the others join it as workers; each gets a toolfleet.zone label."""
    manager = cluster.manager
    manager.docker("swarm", "init", "--advertise-addr", manager.ip)
    token = manager.docker("swarm", "join-token", "-q", "worker").strip()
    for node in cluster.workers:
        node.docker("swarm", "join", "--advertise-addr", node.ip, "--token", token, f"{manager.ip}:2377")
    for zone, node in zip("abcdefgh", cluster.nodes, strict=False):
        manager.docker("node", "update", "--label-add", f"toolfleet.zone={zone}", node.name)


@contextlib.contextmanager
def swarm_nodes(count: int) -> Iterator[Cluster]:
    """`count` nodes joined as one swarm (the first the manager); all of it removed on the way out."""
    cluster = Cluster(uuid.uuid4().hex[:8])
    scratch = Path(tempfile.mkdtemp(prefix=f"toolfleet-nodes-{cluster.run}-"))
    network = f"tfnodes-{cluster.run}"
    try:
        docker("network", "create", "--internal", "--label", cluster.label, network)
        for index in range(count):
            _start(cluster, index, network, scratch)
        for node in cluster.nodes:
            wait_for(f"the engine of {node.name}", node.ready, 60)
        _join(cluster)
        yield cluster
    finally:
        for node in cluster.nodes:
            docker("rm", "-f", "-v", node.name, check=False)
        docker("network", "rm", network, check=False)
        shutil.rmtree(scratch, ignore_errors=True)
