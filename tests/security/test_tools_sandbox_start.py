"""A caller that leaves while its sandbox starts leaves nothing behind (issue 32, finding 5).

The local (bubblewrap) backend as root gives each session a host uid from a pool of `--max-sessions`; a start
abandoned by its caller used to keep its process and uid, and with the pool used up every new session failed
until a restart. The docker backend's start is checked the same way: its container goes with the caller.
Real servers (subprocesses), a real MCP client whose cancelled call sends `notifications/cancelled`, real
bubblewrap and a real Docker engine.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import uuid
from collections.abc import Callable

import anyio
import pytest

from tests.python_sandbox.conftest import containers_of, require_backend, server_args
from tests.support.mcp2 import mcp_session
from tests.support.service import running_service, wait_until


def processes_of(uid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-U", str(uid)], capture_output=True, text=True)
    return [int(pid) for pid in out.stdout.split()]


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


async def leave_while_starting(url: str, session_id: str, starting: Callable[[], bool]) -> None:
    """Call `python` in a new session and cancel the call once `starting()` says its sandbox is being made."""
    async with mcp_session(url, "streamable-http", {"x-session-id": session_id}) as session:
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.call_tool, "python", {"code": "6 * 7"})
            assert await anyio.to_thread.run_sync(wait_until, starting), "the sandbox never started"
            tg.cancel_scope.cancel()


async def test_a_local_sandbox_whose_caller_left_while_it_started_gives_back_its_process_and_uid() -> None:
    require_backend("local")
    if os.geteuid() != 0:
        pytest.skip("per-session uids are given only when the server runs as root")
    base = random.randrange(300_000, 400_000, 10)  # a uid range no other server of this machine uses
    uid = base + 1  # the pool holds one uid: --max-sessions 1
    args = server_args("local", f"pytest-leave-{uuid.uuid4().hex[:8]}", "--max-sessions", "1", "--drain-s", "0")
    with running_service([*args, "--local-uid-base", str(base)]) as server:
        stopped: list[int] = []

        def starting() -> bool:
            """The sandbox's processes exist: stop them, so it cannot become ready before the caller leaves."""
            stopped.extend(processes_of(uid))
            signal_all(stopped, signal.SIGSTOP)
            return bool(stopped)

        try:
            await leave_while_starting(server.url, "left", starting)
            assert wait_until(lambda: processes_of(uid) == [], 10), "the abandoned sandbox's processes live on"
            async with mcp_session(server.url, "streamable-http", {"x-session-id": "next"}) as session:
                result = await session.call_tool("python", {"code": "6 * 7"})
            assert result.content[0].text == "42", result.content[0].text  # the uid came back to the pool
        finally:
            signal_all(processes_of(uid), signal.SIGKILL)  # what a failing run leaked (the processes we stopped)


async def test_a_docker_sandbox_whose_caller_left_while_it_started_is_removed() -> None:
    require_backend("docker")
    instance = f"pytest-leave-{uuid.uuid4().hex[:8]}"
    with running_service(server_args("docker", instance, "--pool-size", "0", "--drain-s", "0")) as server:
        await leave_while_starting(server.url, "left", lambda: bool(containers_of(instance)))
        assert wait_until(lambda: containers_of(instance) == [], 30), "the abandoned sandbox's container stayed"
        async with mcp_session(server.url, "streamable-http", {"x-session-id": "next"}) as session:
            assert (await session.call_tool("python", {"code": "6 * 7"})).content[0].text == "42"
    assert containers_of(instance) == []
