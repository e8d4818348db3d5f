"""The Docker engine connection: every call into the docker SDK, and the translation of its errors where they
enter, so no other module of the kit imports the SDK."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from typing import Any, cast

import anyio
import docker
import docker.errors
import requests.exceptions
import structlog

from toolkit.sandbox.settings import DockerSandboxSettings

log = structlog.get_logger(__name__)

RUNSC_TASKS_PER_PROCESS = 9
RUNSC_BASE_TASKS = 64
"""Under gVisor the sandbox's own host tasks count against the container's pids cgroup: its kernel's threads and
the gofer (about 50 when idle) and, on the ptrace platform, about 8 per guest process (measured here: 20 guest
processes added 166). A runc-sized limit (the lease's 8, python's 128) stops the sandbox itself from starting
("OCI runtime create failed") or kills it later, so under runsc the limit is scaled to mean guest processes."""


class SandboxError(Exception):
    """Our side broke (engine down, image missing): the call fails with an error result, the server lives on."""


def engine_reachable(url: str | None = None) -> bool:
    try:
        client = docker.DockerClient(base_url=url) if url else docker.from_env()
        with contextlib.closing(client):
            return bool(client.ping())
    except docker.errors.DockerException:
        return False


@contextlib.contextmanager
def docker_errors(what: str) -> Iterator[None]:
    """Translate the Docker SDK's exceptions where they enter."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"{what}: image not found ({exc.explanation}); run deploy/build-images.sh") from exc
    except docker.errors.DockerException as exc:
        raise SandboxError(f"{what}: {exc}") from exc


class Engine:
    """One server's connection to its Docker engine. The methods that say "Blocking" run in a worker thread."""

    def __init__(self, settings: DockerSandboxSettings) -> None:
        self._settings = settings
        self._client: docker.DockerClient | None = None

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            raise SandboxError("the container runtime is not started")
        return self._client

    @property
    def connected(self) -> bool:
        return self._client is not None

    def connect(self, image: str) -> None:
        """Blocking: connect, and check that the image and the OCI runtime are there."""
        url = self._settings.docker_url
        with docker_errors("cannot reach the Docker engine"):
            client = docker.DockerClient(base_url=url) if url else docker.from_env()
            client.ping()
        with docker_errors(f"image {image}"):
            client.images.get(image)
        runtime = self._settings.oci_runtime
        with docker_errors("cannot read the engine's OCI runtimes"):
            known = client.info().get("Runtimes") or {}
        if runtime not in known:
            client.close()
            raise SandboxError(
                f"OCI runtime {runtime!r} is not configured in the Docker engine (it has {', '.join(sorted(known))}); "
                "for gVisor install runsc and add it under `runtimes` in /etc/docker/daemon.json"
            )
        self._client = client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def wait_stopped(self, container_ids: list[str], timeout_s: float) -> bool:
        """Blocking: whether every container stops (or is gone) within `timeout_s` (the engine tells, no polling)."""
        deadline = time.monotonic() + timeout_s
        for container_id in container_ids:
            try:
                # the stubs say int; the SDK hands the timeout to requests, which takes a float
                self.client.api.wait(container_id, timeout=max(deadline - time.monotonic(), 0.1))  # type: ignore[arg-type]
            except docker.errors.NotFound:
                continue  # removed meanwhile
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout):
                return False  # no answer in time (a unix socket's read timeout is a ConnectionError): it runs
            except docker.errors.DockerException as exc:
                raise SandboxError(f"cannot wait on a lease container: {exc}") from exc
        return True

    def create_attached(self, kwargs: dict[str, Any]) -> tuple[str, socket.socket]:
        """Blocking: create, attach before start (so no output is lost), start; removed again on failure."""
        kwargs = {"runtime": self._settings.oci_runtime, **kwargs}
        if kwargs["runtime"] == "runsc":
            kwargs["pids_limit"] = kwargs["pids_limit"] * RUNSC_TASKS_PER_PROCESS + RUNSC_BASE_TASKS
        with docker_errors("cannot start a sandbox container"):
            container = self.client.containers.create(**kwargs)
            try:
                attached = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
                raw = cast(socket.socket, getattr(attached, "_sock", attached))  # a SocketIO wraps the socket
                sock = socket.socket(fileno=os.dup(raw.fileno()))
                attached.close()
                container.start()
            except BaseException:
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
                raise
            container_id: str = container.attrs["Id"]
            return container_id, sock

    def exec(self, container_id: str, argv: list[str], user: str) -> tuple[int, bytes]:
        """Blocking: run argv in a running container as `user` (`docker exec`); its exit code and stdout."""
        with docker_errors("cannot exec in the sandbox container"):
            api = self.client.api
            exec_id = api.exec_create(container_id, argv, stdout=True, stderr=False, user=user)["Id"]
            out = api.exec_start(exec_id)
            return int(api.exec_inspect(exec_id)["ExitCode"] or 0), out

    def memory_of(self, container_id: str) -> int | None:
        """Blocking: a container's memory use as `docker stats` shows it (the page cache it may drop is not
        counted); None for one removed meanwhile (the engine answers not found, or an empty body)."""
        with contextlib.suppress(docker.errors.NotFound, ValueError), docker_errors("cannot read sandbox memory"):
            memory = self.client.api.stats(container_id, stream=False, one_shot=True).get("memory_stats") or {}
            stats = memory.get("stats") or {}
            cache = stats.get("inactive_file", stats.get("total_inactive_file", 0))
            return max(int(memory.get("usage", 0)) - int(cache), 0)
        return None

    def labelled(self, *labels: str) -> list[dict[str, Any]]:
        """Blocking: the containers (running or not) that carry every one of `labels`."""
        with docker_errors("cannot list sandbox containers"):
            found: list[dict[str, Any]] = self.client.api.containers(all=True, filters={"label": list(labels)})
            return found

    async def remove(self, container_id: str) -> None:
        """Remove a container, whatever it runs; one already gone is no error, a failure is logged."""

        def remove() -> None:
            with contextlib.suppress(docker.errors.NotFound), docker_errors("cannot remove a sandbox container"):
                self.client.api.remove_container(container_id, force=True)

        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(remove)
            except SandboxError as exc:
                log.warning("container.remove_failed", container=container_id[:12], error=str(exc))

    async def remove_each(self, container_ids: list[str]) -> None:
        """Remove containers all at once (a stop under gVisor takes ~1 s per container)."""
        async with anyio.create_task_group() as group:
            for container_id in container_ids:
                group.start_soon(self.remove, container_id)
