"""Session lifecycle: cleanup, TTL reaping, restarts, dead interpreters, figures, metrics, the mcp 1.x client."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import uuid

import httpx
import pytest

from tests.python_sandbox.conftest import containers_of, require_backend, server_args
from tests.support.mcp1 import arun_mcp1_client
from tests.support.mcp2 import TRANSPORTS, mcp_session
from tests.support.service import Service, running_service, wait_until


async def sandbox_uid(server: Service, session_id: str) -> int:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        return int((await session.call_tool("python", {"code": "import os; os.getuid()"})).content[0].text)


def processes_of(uid: int) -> list[str]:
    out = subprocess.run(["pgrep", "-U", str(uid)], capture_output=True, text=True)
    return out.stdout.split()


def sessions_held(server: Service) -> int:
    return httpx.get(f"{server.url}/healthz").json()["sessions"]


async def test_cleanup_session_frees_everything_the_session_held(server: Service, backend: str, instance: str):
    sid = f"cleanup-{uuid.uuid4().hex[:8]}"
    uid = await sandbox_uid(server, sid)
    if backend == "docker":
        assert wait_until(lambda: len(containers_of(instance)) == 2)  # the session's, and a refilled warm one
    async with mcp_session(server.url, "sse", {"x-session-id": sid}) as session:
        text = (await session.call_tool("cleanup_session", {})).content[0].text
    assert text == f"session {sid} cleaned up"
    assert sessions_held(server) == 0
    if backend == "docker":
        assert len(containers_of(instance)) == 1  # only the warm pool is left
    else:
        assert wait_until(lambda: processes_of(uid) == [], 5)


async def test_dead_interpreter_resets_the_session_and_says_so(server: Service, session_id: str) -> None:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        await session.call_tool("python", {"code": "before = 1"})
        text = (await session.call_tool("python", {"code": "import os; os._exit(3)"})).content[0].text
        assert "session was reset" in text and "lost" in text
        after = (await session.call_tool("python", {"code": "'before' in globals()"})).content[0].text
        assert after == "False"
        await session.call_tool("cleanup_session", {})


async def test_matplotlib_figures_come_back_as_png(server: Service, backend: str, session_id: str) -> None:
    if backend != "docker":
        pytest.skip("matplotlib is in the docker image, not on the host's bare python")
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        code = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nprint('drawn')"
        result = await session.call_tool("python", {"code": code})
        await session.call_tool("cleanup_session", {})
    text, image = result.content
    assert text.text == "drawn"
    assert image.type == "image" and image.mime_type == "image/png"
    assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")


async def test_metrics_count_calls_sessions_and_latency(server: Service, session_id: str) -> None:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        await session.call_tool("python", {"code": "1"})
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"{server.url}/metrics")).text
        await session.call_tool("cleanup_session", {})
    assert 'toolfleet_tool_calls_total{namespace="python",outcome="ok",tool="python"}' in metrics
    assert 'toolfleet_tool_call_seconds_bucket{le="0.005",namespace="python",tool="python"}' in metrics
    assert 'toolfleet_tool_sessions_active{namespace="python"} ' in metrics


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_mcp_1x_client_drives_a_stateful_session(server: Service, transport: str, session_id: str) -> None:
    ops = [
        ["list_tools"],
        ["call_tool", "python", {"code": "total = 40"}],
        ["call_tool", "python", {"code": "total + 2"}],
        ["call_tool", "python", {}],
        ["call_tool", "cleanup_session", {}],
    ]
    url = f"{server.url}/{'sse' if transport == 'sse' else 'mcp'}"
    out = await arun_mcp1_client(url, ops, transport=transport, headers={"x-session-id": session_id})
    assert out["server_info"]["name"] == "python"
    listed, _, answer, bad, cleanup = out["results"]
    hidden_file_tools = {"write_file", "read_file", "list_files"}  # how container files travel (not prompted)
    assert {t["name"] for t in listed["tools"]} == {"python", "cleanup_session", *hidden_file_tools}
    assert answer["result"]["content"][0]["text"] == "42"
    assert bad["result"]["isError"] is True
    assert cleanup["result"]["content"][0]["text"] == f"session {session_id} cleaned up"


@pytest.mark.parametrize("backend_name", ["docker", "local"])
async def test_idle_sessions_are_reaped_after_the_ttl(backend_name: str) -> None:
    require_backend(backend_name)
    instance = f"pytest-ttl-{uuid.uuid4().hex[:8]}"
    args = server_args(backend_name, instance, "--session-ttl-s", "1", "--reap-interval-s", "0.2", "--pool-size", "0")
    with running_service(args) as server:
        uid = await sandbox_uid(server, "idle")
        assert sessions_held(server) == 1
        assert wait_until(lambda: sessions_held(server) == 0, 10)
        if backend_name == "docker":  # the reaper drops the session, then removes its container
            assert wait_until(lambda: containers_of(instance) == [], 10)
        else:
            assert wait_until(lambda: processes_of(uid) == [], 5)
        async with mcp_session(server.url, "streamable-http", {"x-session-id": "idle"}) as session:
            first = (await session.call_tool("python", {"code": "x = 1; 'fresh'"})).content[0].text
            second = (await session.call_tool("python", {"code": "x"})).content[0].text
        assert first.startswith("[this session's state was reaped after ") and " seconds idle" in first
        assert first.endswith("'fresh'") and second == "1"  # said once, then the new state serves


async def test_a_caller_at_its_limit_starts_a_new_conversation_by_evicting_its_least_recently_used() -> None:
    require_backend("local")
    instance = f"pytest-evict-{uuid.uuid4().hex[:8]}"
    with running_service(server_args("local", instance, "--max-sessions-per-owner", "2")) as server:
        for sid in ("oldest", "recent"):
            async with mcp_session(server.url, "streamable-http", {"x-session-id": sid}) as session:
                await session.call_tool("python", {"code": f"mine = {sid!r}"})
        async with mcp_session(server.url, "streamable-http", {"x-session-id": "new"}) as session:
            assert (await session.call_tool("python", {"code": "6 * 7"})).content[0].text == "42"
        assert sessions_held(server) == 2
        async with mcp_session(server.url, "streamable-http", {"x-session-id": "recent"}) as session:
            assert (await session.call_tool("python", {"code": "mine"})).content[0].text == "'recent'"
        async with mcp_session(server.url, "streamable-http", {"x-session-id": "oldest"}) as session:
            evicted = (await session.call_tool("python", {"code": "'fresh'"})).content[0].text
        assert evicted.startswith("[this session's state was evicted (this owner's session limit of 2")
        assert evicted.endswith("'fresh'")


@pytest.mark.parametrize("backend_name", ["docker", "local"])
async def test_a_killed_server_leaves_nothing_after_restart(backend_name: str) -> None:
    require_backend(backend_name)
    instance = f"pytest-restart-{uuid.uuid4().hex[:8]}"
    args = server_args(backend_name, instance)
    with running_service(args) as server:
        uids = [await sandbox_uid(server, f"s{i}") for i in range(2)]
        if backend_name == "docker":  # the pool refills after each take: wait for it (under load it lags)
            assert wait_until(lambda: len(containers_of(instance)) == 3)
        server.stop(signal.SIGKILL)
    if backend_name == "docker":
        assert len(containers_of(instance)) == 3  # two sessions and a warm one, orphaned by the crash
        with running_service(args) as server:
            assert len(containers_of(instance)) <= 1  # the restart removed the orphans; the pool refills
        assert containers_of(instance) == []  # and a graceful stop removes everything
    else:
        assert wait_until(lambda: all(processes_of(uid) == [] for uid in uids), 5)  # --die-with-parent


@pytest.mark.parametrize(
    ("backend_name", "flag", "message"),
    [
        ("docker", ["--image", "toolfleet/no-such-image:none"], "image not found"),
        ("local", ["--local-python", "/nonexistent/python3"], "is not executable"),
    ],
)
def test_a_server_that_cannot_sandbox_refuses_to_start_and_says_why(backend_name, flag, message) -> None:
    require_backend(backend_name)
    with pytest.raises(RuntimeError, match="service exited") as failure:
        with running_service(server_args(backend_name, f"pytest-bad-{uuid.uuid4().hex[:8]}", *flag), timeout_s=30):
            pass
    assert message in str(failure.value)


async def test_logs_are_json_lines_with_namespace_session_and_request_ids(server: Service, session_id: str) -> None:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        await session.call_tool("python", {"code": "1"})
        await session.call_tool("cleanup_session", {})
    events = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    calls = [e for e in events if e["event"] == "tool.call" and e.get("session_id") == session_id]
    assert [c["tool"] for c in calls] == ["python", "cleanup_session"]
    assert all(c["namespace"] == "python" and c["request_id"] and c["outcome"] == "ok" for c in calls)
