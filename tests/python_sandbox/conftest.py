"""Real python tool servers (subprocesses) on both backends: docker (real engine) and local (real bwrap)."""

from __future__ import annotations

import functools
import shutil
import uuid
from collections.abc import Iterator

import docker
import pytest

from tests.support.service import Service, running_service

TIMEOUT_S = 3
PATIENT_TIMEOUT_S = 60


@functools.cache
def docker_client() -> docker.DockerClient | None:
    """One client for the test run (None when no engine or no sandbox image)."""
    try:
        client = docker.from_env()
        client.ping()
        client.images.get("toolfleet/python-sandbox:latest")
        return client
    except docker.errors.DockerException:
        return None


def server_args(
    backend: str, instance: str, *extra: str, timeout_s: float = TIMEOUT_S, oci_runtime: str = "runc"
) -> list[str]:
    return [
        "-m",
        "tools.python_sandbox",
        "--backend",
        backend,
        "--timeout-s",
        str(timeout_s),
        "--instance",
        instance,
        "--pool-size",
        "1",
        "--memory-mb",
        "512",
        "--disk-mb",
        "64",
        "--max-output-chars",
        "5000",
        *(["--oci-runtime", oci_runtime] if backend == "docker" else []),
        *extra,
    ]


def require_backend(backend: str, oci_runtime: str = "runc") -> None:
    if backend == "docker" and docker_client() is None:
        pytest.skip("needs a Docker engine and toolfleet/python-sandbox:latest (deploy/build-images.sh)")
    if backend == "docker" and oci_runtime not in (docker_client().info().get("Runtimes") or {}):  # type: ignore[union-attr]
        pytest.skip(f"the Docker engine has no {oci_runtime} runtime (deploy/setup-host.sh gvisor registers runsc)")
    if backend == "local" and shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")


@pytest.fixture(
    scope="module",
    params=[("docker", "runc"), ("local", ""), ("docker", "runsc")],
    ids=["docker", "local", "docker-runsc"],
)
def sandbox(request: pytest.FixtureRequest) -> tuple[str, str]:
    """Where sessions run: the docker backend under runc and under gVisor (runsc), and the local one (bwrap)."""
    require_backend(*request.param)
    return request.param


@pytest.fixture(scope="module")
def backend(sandbox: tuple[str, str]) -> str:
    return sandbox[0]


@pytest.fixture(scope="module")
def oci_runtime(sandbox: tuple[str, str]) -> str:
    return sandbox[1]


@pytest.fixture(scope="module")
def instance() -> str:
    return f"pytest-{uuid.uuid4().hex[:10]}"


def serving(backend: str, instance: str, oci_runtime: str, timeout_s: float = TIMEOUT_S) -> Iterator[Service]:
    """A server for the module; on the docker backend it must leave none of its containers behind."""
    with running_service(server_args(backend, instance, timeout_s=timeout_s, oci_runtime=oci_runtime)) as svc:
        yield svc
    if backend == "docker":
        assert containers_of(instance) == [], "the server left containers behind"


@pytest.fixture(scope="module")
def server(backend: str, instance: str, oci_runtime: str) -> Iterator[Service]:
    yield from serving(backend, instance, oci_runtime)


@pytest.fixture(scope="module")
def patient_server(backend: str, instance: str, oci_runtime: str) -> Iterator[Service]:
    """A server whose calls may run for a minute, for outcomes that must not hang on the machine's speed.

    Filling memory page by page can take 10x longer on a loaded VM (first-touch faults): under the
    3 s server a memory bomb then ends in a timeout before it reaches the limit under test.
    """
    yield from serving(backend, f"{instance}-patient", oci_runtime, PATIENT_TIMEOUT_S)


def containers_of(instance: str) -> list[str]:
    """Ids of the run's containers; sparse, so one removed between listing and inspecting is no error."""
    client = docker_client()
    assert client is not None
    found = client.containers.list(all=True, sparse=True, filters={"label": f"toolfleet.instance={instance}"})
    return [c.id for c in found]


@pytest.fixture
def session_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"
