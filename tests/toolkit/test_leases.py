"""The shared container runtime's owner leases: a SIGKILLed replica's sandboxes are removed by a successor."""

from __future__ import annotations

import contextlib
import signal
import uuid

import docker.errors
import pytest

from tests.python_sandbox.conftest import docker_client, server_args
from tests.python_sandbox.test_lifecycle import sandbox_uid
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service, wait_until
from toolkit.sandbox.leases import LEASE_ROLE
from toolkit.sandbox.runtime import ContainerRuntime
from toolkit.wire import LEASE_LABEL, OWNER_LABEL, ROLE_LABEL
from tools.python_sandbox.settings import PythonSandboxSettings

LEASE = ["--lease-s", "2", "--janitor-interval-s", "0.5"]


async def python(server: Service, sid: str, code: str) -> str:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": sid}) as session:
        return (await session.call_tool("python", {"code": code})).content[0].text


def labelled(label: str, value: str, *, running_only: bool = False) -> list[str]:
    client = docker_client()
    assert client is not None
    found = client.api.containers(all=not running_only, filters={"label": f"{label}={value}"})
    return [c["Id"] for c in found]  # the low-level listing: no per-container inspect racing a removal


@pytest.fixture(autouse=True)
def _needs_docker() -> None:
    if docker_client() is None:
        pytest.skip("needs a Docker engine and toolfleet/python-sandbox:latest (deploy/build-images.sh)")


async def test_a_successor_under_another_name_removes_a_sigkilled_replicas_sandboxes() -> None:
    run = uuid.uuid4().hex[:8]
    dead, successor = f"pytest-lease-a-{run}", f"pytest-lease-b-{run}"
    with running_service(server_args("docker", dead, *LEASE)) as victim:
        for i in range(2):
            await sandbox_uid(victim, f"lease-{i}")
        assert wait_until(lambda: len(labelled("toolfleet.instance", dead)) == 3)  # two sessions, one pool
        assert len(labelled("toolfleet.lease", dead, running_only=True)) == 1
        victim.stop(signal.SIGKILL)
    assert len(labelled("toolfleet.instance", dead)) == 3  # orphaned: nobody of that name will come back
    # the killed owner's attached stdin closed, so its lease container's watchdog ended at once
    assert wait_until(lambda: labelled("toolfleet.lease", dead, running_only=True) == [], 5)
    with running_service(server_args("docker", successor, *LEASE)) as heir:
        assert wait_until(lambda: labelled("toolfleet.instance", dead) == [], 10)
        assert wait_until(lambda: labelled("toolfleet.lease", dead) == [], 5)
        assert wait_until(lambda: "janitor.removed" in heir.log(), 5)  # logged once the removals have returned
        # the successor's own sandboxes are left alone by its janitor and by itself
        await sandbox_uid(heir, "heir-session")
        assert len(labelled("toolfleet.instance", successor)) >= 1
    assert labelled("toolfleet.instance", successor) == [] and labelled("toolfleet.lease", successor) == []


async def test_a_live_replicas_sandboxes_survive_another_replicas_janitor() -> None:
    run = uuid.uuid4().hex[:8]
    first, second = f"pytest-live-a-{run}", f"pytest-live-b-{run}"
    with running_service(server_args("docker", first, *LEASE)) as a:
        await sandbox_uid(a, "kept")
        with running_service(server_args("docker", second, *LEASE)):
            before = set(labelled("toolfleet.instance", first))
            # several janitor rounds and lease periods pass: heartbeats keep the first replica's lease live
            assert not wait_until(lambda: set(labelled("toolfleet.instance", first)) != before, 6)
            assert len(labelled("toolfleet.lease", first, running_only=True)) == 1
        assert await sandbox_uid(a, "kept") == 65534


async def test_a_replica_whose_lease_container_died_takes_a_new_one_and_keeps_its_sandboxes() -> None:
    client = docker_client()
    assert client is not None
    instance = f"pytest-retake-{uuid.uuid4().hex[:8]}"
    with running_service(server_args("docker", instance, *LEASE)) as server:
        assert await python(server, "kept", "state = 'survived'") == "[no output]"
        (lease,) = labelled("toolfleet.lease", instance, running_only=True)
        client.api.kill(lease)
        assert wait_until(lambda: labelled("toolfleet.lease", instance, running_only=True) not in ([], [lease]), 5)
        assert wait_until(lambda: lease not in labelled("toolfleet.lease", instance), 5)  # the old one removed
        assert await python(server, "kept", "state") == "'survived'"  # the session's interpreter lives on
        assert "lease.lost" in server.log()


def test_one_setting_makes_an_oci_runtime_the_default_of_every_sandbox_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.container.settings import ContainerSettings
    from tools.python_sandbox.settings import PythonSandboxSettings

    assert PythonSandboxSettings.from_args([], prog="t").oci_runtime == "runc"
    monkeypatch.setenv("TOOLFLEET_OCI_RUNTIME", "runsc")
    assert PythonSandboxSettings.from_args([], prog="t").oci_runtime == "runsc"
    assert ContainerSettings.from_args([], prog="t").oci_runtime == "runsc"
    assert ContainerSettings.from_args(["--oci-runtime", "runc"], prog="t").oci_runtime == "runc"  # a flag still wins
    monkeypatch.setenv("TOOLFLEET_CONTAINER_OCI_RUNTIME", "runc")
    assert ContainerSettings.from_args([], prog="t").oci_runtime == "runc"  # and so does the tool's own variable


async def test_a_lease_being_started_is_live_for_a_janitor_round_and_dead_if_it_never_starts() -> None:
    """A replica creates its lease, attaches and only then starts it: a peer's janitor that lists it in between
    must not take the replica for dead (its sandboxes would go), yet a lease that never starts is an owner gone."""
    client = docker_client()
    assert client is not None
    run = uuid.uuid4().hex[:8]
    settings = PythonSandboxSettings.from_args(["--instance", f"pytest-janitor-{run}"], prog="t")
    janitor = ContainerRuntime(settings, role="python", image="toolfleet/python-sandbox:latest")
    starting = f"pytest-starting-{run}"
    made = [
        client.api.create_container("toolfleet/python-sandbox:latest", ["true"], labels=labels)["Id"]
        for labels in ({LEASE_LABEL: starting, ROLE_LABEL: LEASE_ROLE}, {OWNER_LABEL: starting, ROLE_LABEL: "python"})
    ]
    await janitor.start()
    try:
        assert await janitor.lease.remove_orphans() == 0
        assert len(labelled(LEASE_LABEL, starting)) == 1 and len(labelled(OWNER_LABEL, starting)) == 1
        assert await janitor.lease.remove_orphans() == 2  # still not started a round later: its owner died
        assert labelled(LEASE_LABEL, starting) == [] and labelled(OWNER_LABEL, starting) == []
    finally:
        await janitor.aclose()
        for container_id in made:
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_container(container_id, force=True)
