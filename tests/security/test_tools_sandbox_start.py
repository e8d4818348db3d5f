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
from pathlib import Path

import anyio
import pytest

from tests.python_sandbox.conftest import containers_of, require_backend, server_args
from tests.support.mcp2 import mcp_session
from tests.support.service import running_service, wait_until

GATE = """#!/bin/sh
# setpriv for the test server: once armed (its .armed file), the next sandbox, as its uid, stops before bubblewrap
if rm "$0.armed" 2>/dev/null; then
    reuid=$1 regid=$2 groups=$3
    shift 4  # setpriv's options and its "--"; bubblewrap's argv is left
    exec /usr/bin/setpriv "$reuid" "$regid" "$groups" -- /bin/sh -c 'kill -STOP $$ && exec "$@"' sh "$@"
fi
exec /usr/bin/setpriv "$@"
"""


def processes_of(uid: int) -> list[int]:
    """The processes of `uid` that live: a zombie (dead, waiting for its parent or init to reap it) is not one."""
    out = subprocess.run(["ps", "-U", str(uid), "-o", "pid=,stat="], capture_output=True, text=True)
    return [int(pid) for pid, stat in (line.split() for line in out.stdout.splitlines()) if not stat.startswith("Z")]


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


async def leave_while_starting(url: str, session_id: str, starting: Callable[[], bool]) -> None:
    """Call `python` in a new session and cancel the call once `starting()` says its sandbox is being made.

    The server answers the cancelled call (a 2025-era session ends a request only with an answer), and that answer
    can reach the client after it closed its session: the client transport then fails on its own closed stream
    (BrokenResourceError, or ClosedResourceError as it shuts). That is the client having left, not a failure;
    the same errors before it left are."""
    left = False
    try:
        async with mcp_session(url, "streamable-http", {"x-session-id": session_id}) as session:
            async with anyio.create_task_group() as tg:
                tg.start_soon(session.call_tool, "python", {"code": "6 * 7"})
                started = await anyio.to_thread.run_sync(wait_until, starting)
                left = True
                tg.cancel_scope.cancel()
    except* (anyio.BrokenResourceError, anyio.ClosedResourceError):
        if not left:
            raise
    assert started, "the sandbox never started"


async def test_a_local_sandbox_whose_caller_left_while_it_started_gives_back_its_process_and_uid(
    tmp_path: Path,
) -> None:
    require_backend("local")
    if os.geteuid() != 0:
        pytest.skip("per-session uids are given only when the server runs as root")
    base = random.randrange(300_000, 400_000, 10)  # a uid range no other server of this machine uses
    uid = base + 1  # the pool holds one uid: --max-sessions 1
    gate = tmp_path / "setpriv"
    gate.write_text(GATE)
    gate.chmod(0o755)
    path = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    args = server_args("local", f"pytest-leave-{uuid.uuid4().hex[:8]}", "--max-sessions", "1", "--drain-s", "0")
    with running_service([*args, "--local-uid-base", str(base)], env=path) as server:
        await anyio.Path(f"{gate}.armed").touch()  # armed once the start-up probe is done: the call's sandbox stops

        def starting() -> bool:
            """The call's sandbox has a process as its uid, stopped before bubblewrap: it cannot become ready
            before the caller leaves. (The server gives a uid back only once no process of it lives.)"""
            return bool(processes_of(uid))

        try:
            await leave_while_starting(server.url, "left", starting)
            assert wait_until(lambda: processes_of(uid) == [], 30), "the abandoned sandbox's processes live on"
            async with mcp_session(server.url, "streamable-http", {"x-session-id": "next"}) as session:
                result = await session.call_tool("python", {"code": "6 * 7"})
            assert result.content[0].text == "42", result.content[0].text  # the uid came back to the pool
        finally:
            signal_all(processes_of(uid), signal.SIGKILL)  # what a failing run leaked (the process that stopped)


async def test_a_docker_sandbox_whose_caller_left_while_it_started_is_removed() -> None:
    require_backend("docker")
    instance = f"pytest-leave-{uuid.uuid4().hex[:8]}"
    with running_service(server_args("docker", instance, "--pool-size", "0", "--drain-s", "0")) as server:
        await leave_while_starting(server.url, "left", lambda: bool(containers_of(instance)))
        assert wait_until(lambda: containers_of(instance) == [], 30), "the abandoned sandbox's container stayed"
        async with mcp_session(server.url, "streamable-http", {"x-session-id": "next"}) as session:
            assert (await session.call_tool("python", {"code": "6 * 7"})).content[0].text == "42"
    assert containers_of(instance) == []
