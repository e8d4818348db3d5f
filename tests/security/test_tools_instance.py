"""A second tool server of a live one's instance name touches none of its sandboxes (issue 32, finding 13).

The instance name (the label on a server's sandboxes) defaults to host-port, so a server started by mistake on
a live one's port shares it; it used to remove the live server's sandboxes as leftovers before it failed to
bind. Now a server binds its port before it starts anything, and one started with the same `--instance` on
another port waits on the namesake's owner lease and refuses while it is alive. Real python tool servers
(subprocesses) on the real Docker engine, the real MCP client.
"""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Iterator

import anyio
import pytest

from tests.python_sandbox.conftest import containers_of, require_backend, server_args
from tests.support.mcp2 import mcp_session
from tests.support.service import REPO, Service, running_service

LEASE_S = "3"


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[Service, str]]:
    """The live server, under the default instance name (host-port) its port gives it."""
    require_backend("docker")
    with running_service(server_args("docker", "", "--lease-s", LEASE_S)) as server:
        instance = f"{socket.gethostname()}-{server.port}"
        yield server, instance
    assert containers_of(instance) == [], "the live server left containers behind"


async def remember(server: Service, session_id: str) -> None:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        assert not (await session.call_tool("python", {"code": "kept = 'still here'"})).is_error


async def recall(server: Service, session_id: str) -> str:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        return (await session.call_tool("python", {"code": "kept"})).content[0].text


async def test_a_second_server_on_a_live_ones_port_fails_to_bind_having_touched_nothing(
    live: tuple[Service, str],
) -> None:
    server, instance = live
    sid = f"port-{uuid.uuid4().hex[:8]}"
    await remember(server, sid)
    before = set(containers_of(instance))
    args = [sys.executable, *server_args("docker", "", "--lease-s", LEASE_S), "--port", str(server.port)]
    second = await anyio.run_process(args, cwd=REPO, check=False)
    assert second.returncode != 0 and b"address already in use" in (second.stdout + second.stderr).lower()
    assert before <= set(containers_of(instance)), "the second server removed the live one's sandboxes"
    assert await recall(server, sid) == "'still here'"


async def test_a_second_server_of_a_live_ones_instance_name_refuses_to_start(live: tuple[Service, str]) -> None:
    server, instance = live
    sid = f"name-{uuid.uuid4().hex[:8]}"
    await remember(server, sid)
    before = set(containers_of(instance))
    with pytest.raises(RuntimeError, match="service exited") as refused:
        with running_service(server_args("docker", instance, "--lease-s", LEASE_S)):
            pass
    assert f"another live server holds instance {instance!r}" in str(refused.value)
    assert before <= set(containers_of(instance)), "the second server removed the live one's sandboxes"
    assert await recall(server, sid) == "'still here'"
