"""Real container tool servers (subprocesses) on the real Docker engine; every container labelled per run."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator

import docker
import pytest

from tests.support.service import Service, running_service

IMAGE = "toolfleet/container-sandbox:latest"
TIMEOUT_S = 4


@functools.cache
def docker_client() -> docker.DockerClient | None:
    """One client for the test run (None when no engine or no sandbox image)."""
    try:
        client = docker.from_env()
        client.ping()
        client.images.get(IMAGE)
        return client
    except docker.errors.DockerException:
        return None


def require_docker() -> docker.DockerClient:
    client = docker_client()
    if client is None:
        pytest.skip(f"needs a Docker engine and {IMAGE} (deploy/build-images.sh)")
    return client


def server_args(instance: str, *extra: str) -> list[str]:
    return [
        "-m",
        "tools.container",
        "--instance",
        instance,
        "--timeout-s",
        str(TIMEOUT_S),
        "--max-timeout-s",
        "8",
        "--pool-size",
        "1",
        "--memory-mb",
        "256",
        "--pids",
        "64",
        "--disk-mb",
        "32",
        "--max-output-bytes",
        "2000",
        "--allowed-users",
        '["nobody"]',
        "--progress-s",
        "1",
        *extra,
    ]


def containers_of(instance: str) -> list[str]:
    """Every container this instance made: its sandboxes and its owner lease."""
    client = require_docker()
    found = []
    for label in ("toolfleet.instance", "toolfleet.lease"):
        found += [c["Id"] for c in client.api.containers(all=True, filters={"label": f"{label}={instance}"})]
    return found


def sandboxes_of(instance: str) -> list[str]:
    client = require_docker()
    return [c["Id"] for c in client.api.containers(all=True, filters={"label": f"toolfleet.instance={instance}"})]


@pytest.fixture(scope="module")
def instance() -> str:
    return f"pytest-ctr-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module", params=["runc", "runsc"])
def oci_runtime(request: pytest.FixtureRequest) -> str:
    """The module's server runs its sessions under runc, then under gVisor (runsc) where the engine has it."""
    if request.param not in (require_docker().info().get("Runtimes") or {}):
        pytest.skip(f"the Docker engine has no {request.param} runtime (deploy/setup-host.sh gvisor registers runsc)")
    return request.param


@pytest.fixture(scope="module")
def server(instance: str, oci_runtime: str) -> Iterator[Service]:
    with running_service(server_args(instance, "--oci-runtime", oci_runtime)) as svc:
        yield svc
    assert containers_of(instance) == [], "the server left containers behind"


@pytest.fixture
def session_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"
