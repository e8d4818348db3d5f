"""Container lifecycle: cleanup_session, TTL, restarts, start-up failures, the OCI runtime, the mcp 1.x client."""

from __future__ import annotations

import signal
import uuid

import pytest

from tests.container.conftest import containers_of, require_docker, sandboxes_of, server_args
from tests.support.mcp1 import arun_mcp1_client
from tests.support.mcp2 import TRANSPORTS, mcp_session
from tests.support.service import Service, running_service, wait_until


async def hostname(server: Service, sid: str) -> str:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": sid}) as session:
        result = await session.call_tool("exec", {"cmd": ["hostname"]})
    return result.structured_content["stdout"].strip()


def short_ids(instance: str) -> set[str]:
    return {c[:12] for c in sandboxes_of(instance)}


async def test_cleanup_session_removes_the_sessions_container(server: Service, instance: str) -> None:
    sid = f"cleanup-{uuid.uuid4().hex[:8]}"
    name = await hostname(server, sid)  # a container's hostname is its short id
    assert name in short_ids(instance)
    async with mcp_session(server.url, "sse", {"x-session-id": sid}) as session:
        text = (await session.call_tool("cleanup_session", {})).content[0].text
    assert text == f"session {sid} cleaned up"
    assert name not in short_ids(instance)
    assert await hostname(server, sid) != name  # the next call starts a fresh container


async def test_idle_sessions_are_reaped_after_the_ttl_and_nothing_is_left() -> None:
    require_docker()
    instance = f"pytest-ctr-ttl-{uuid.uuid4().hex[:8]}"
    args = server_args(instance, "--session-ttl-s", "1", "--reap-interval-s", "0.2", "--pool-size", "0")
    with running_service(args) as server:
        await hostname(server, "idle")
        assert len(sandboxes_of(instance)) == 1
        assert wait_until(lambda: sandboxes_of(instance) == [], 10)
        async with mcp_session(server.url, "streamable-http", {"x-session-id": "idle"}) as session:
            first = (await session.call_tool("exec", {"cmd": ["echo", "hi"]})).content[0].text
            second = (await session.call_tool("exec", {"cmd": ["echo", "hi"]})).content[0].text
        assert first.startswith("[this session's state was reaped after ") and "reaped" not in second
    assert containers_of(instance) == []


async def test_a_killed_server_leaves_nothing_after_restart() -> None:
    require_docker()
    instance = f"pytest-ctr-restart-{uuid.uuid4().hex[:8]}"
    with running_service(server_args(instance)) as server:
        for i in range(2):
            await hostname(server, f"s{i}")
        assert wait_until(lambda: len(sandboxes_of(instance)) == 3)  # two sessions and a warm one
        server.stop(signal.SIGKILL)
    assert len(sandboxes_of(instance)) == 3  # orphaned by the crash
    with running_service(server_args(instance)):
        assert len(sandboxes_of(instance)) <= 1  # the restart removed the orphans; the pool refills
    assert containers_of(instance) == []  # and a graceful stop removes everything, the lease too


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--image", "toolfleet/no-such-image:none"], "image not found"),
        (["--oci-runtime", "no-such-runtime"], "OCI runtime 'no-such-runtime' is not configured"),
    ],
)
def test_a_server_that_cannot_run_containers_refuses_to_start_and_says_why(flags: list[str], message: str) -> None:
    require_docker()
    instance = f"pytest-ctr-bad-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RuntimeError, match="service exited") as failure:
        with running_service(server_args(instance, *flags), timeout_s=30):
            pass
    assert message in str(failure.value)
    assert containers_of(instance) == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mcp_1x_client_drives_a_persistent_session(server: Service, transport: str, session_id: str) -> None:
    ops = [
        ["list_tools"],
        ["call_tool", "exec", {"cmd": ["bash", "-lc", "echo 42 > answer"]}],
        ["call_tool", "exec", {"cmd": ["cat", "answer"]}],
        ["call_tool", "exec", {"cmd": "cat answer"}],
        ["call_tool", "cleanup_session", {}],
    ]
    url = f"{server.url}/{'sse' if transport == 'sse' else 'mcp'}"
    out = await arun_mcp1_client(url, ops, transport=transport, headers={"x-session-id": session_id})
    assert out["server_info"]["name"] == "container"
    listed, _, answer, bad, cleanup = out["results"]
    assert {t["name"] for t in listed["tools"]} == {"exec", "write_file", "read_file", "list_files", "cleanup_session"}
    assert answer["result"]["content"][0]["text"] == "42\n[exit code 0]"
    assert answer["result"]["structuredContent"]["exit_code"] == 0
    assert bad["result"]["isError"] is True
    assert cleanup["result"]["content"][0]["text"] == f"session {session_id} cleaned up"
