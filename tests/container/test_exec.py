"""The `exec` contract against the real engine: layout, persistence, shells, limits, bad input."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from tests.container.conftest import TIMEOUT_S
from tests.support.mcp2 import TRANSPORTS, mcp_session
from tests.support.sandbox import assert_no_host_paths
from tests.support.service import Service


async def run(server: Service, sid: str, transport: str = "streamable-http", **args: Any) -> Any:
    async with mcp_session(server.url, transport, {"x-session-id": sid}) as session:
        return await session.call_tool("exec", args)


async def text(server: Service, sid: str, cmd: list[str], **args: Any) -> str:
    result = await run(server, sid, cmd=cmd, **args)
    assert not result.is_error, result.content[0].text
    return result.content[0].text


def bash(script: str) -> list[str]:
    return ["bash", "-lc", script]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_namespace_describes_the_container_and_hides_the_helper_tools(server: Service, transport: str) -> None:
    async with mcp_session(server.url, transport) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    assert set(tools) == {"exec", "write_file", "read_file", "list_files", "cleanup_session"}
    shown = {"cmd", "workdir", "env", "session_name", "timeout", "user"}
    handle = set() if transport == "sse" else {"session_handle"}  # legacy SSE (vLLM) keeps the trained shape
    assert set(tools["exec"].input_schema["properties"]) == shown | handle
    assert (tools["exec"].meta or {}).get("include_in_prompt") is not False  # exec is in the prompt
    for hidden in ("write_file", "read_file", "list_files", "cleanup_session"):
        assert tools[hidden].meta == {"include_in_prompt": False}


async def test_instructions_name_image_persistence_time_limit_and_no_network(server: Service) -> None:
    async with mcp_session(server.url, "sse") as session:
        info = await session.initialize()
    assert info.server_info.name == "container"
    words = info.instructions
    assert "toolfleet/container-sandbox:latest" in words and "whole conversation" in words
    assert f"at most {TIMEOUT_S:g} s" in words and "no network access" in words


async def test_the_text_layout_and_structured_content_are_stable(server: Service, session_id: str) -> None:
    result = await run(server, session_id, cmd=bash("echo out; echo err >&2; exit 3"))
    assert result.content[0].text == "out\n[stderr]\nerr\n[exit code 3]"
    assert result.structured_content == {
        "stdout": "out\n",
        "stderr": "err\n",
        "exit_code": 3,
        "timed_out": False,
        "truncated": False,
    }
    quiet = await run(server, session_id, cmd=["true"])
    assert quiet.content[0].text == "[exit code 0]"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_files_and_installed_programs_persist_across_calls_and_connections(
    server: Service, session_id: str, transport: str
) -> None:
    await text(
        server, session_id, bash("mkdir -p .local/bin && printf '#!/bin/sh\\necho tool ran\\n' > .local/bin/mytool")
    )
    await text(server, session_id, ["chmod", "+x", ".local/bin/mytool"])
    result = await run(server, session_id, transport, cmd=bash("mytool && echo .local/bin/*"))  # a new connection
    assert result.content[0].text == "tool ran\n.local/bin/mytool\n[exit code 0]"
    other = await run(server, f"{session_id}-other", transport, cmd=["ls", "-A"])
    assert other.content[0].text == "[exit code 0]"  # another session has its own, empty container


async def test_named_shells_keep_their_own_directory_and_exported_variables(server: Service, session_id: str) -> None:
    await text(server, session_id, bash("mkdir -p a b && cd a && export WHO=first"), session_name="one")
    await text(server, session_id, bash("cd b; export WHO=second; unset HOME"), session_name="two")
    assert (
        await text(server, session_id, bash('echo "$PWD $WHO"'), session_name="one")
        == "/workspace/a first\n[exit code 0]"
    )
    got = await text(server, session_id, bash('echo "$PWD $WHO ${HOME-unset}"'), session_name="two")
    assert got == "/workspace/b second unset\n[exit code 0]"
    assert await text(server, session_id, bash('echo "$PWD ${WHO-none}"')) == "/workspace none\n[exit code 0]"
    # a plain argv (no shell script) runs in the shell's directory without changing it
    assert await text(server, session_id, ["pwd"], session_name="one") == "/workspace/a\n[exit code 0]"


async def test_argv_commands_in_a_named_shell_run_in_that_shell_and_keep_its_state(
    server: Service, session_id: str
) -> None:
    await text(server, session_id, ["cd", "/tmp"], session_name="s1")
    assert await text(server, session_id, ["pwd"], session_name="s1") == "/tmp\n[exit code 0]"
    await text(server, session_id, ["export", "WHO=first one"], session_name="s1")
    await text(server, session_id, bash('greet() { echo "hello $1 from $WHO"; }'), session_name="s1")
    assert (
        await text(server, session_id, ["greet", "you"], session_name="s1") == "hello you from first one\n[exit code 0]"
    )
    # quoted as data: the `;` and `$(...)` reach echo as text, nothing runs
    quoted = await text(server, session_id, ["echo", "a b; touch /tmp/owned $(id -u)"], session_name="s1")
    assert quoted == "a b; touch /tmp/owned $(id -u)\n[exit code 0]"
    assert await text(server, session_id, ["test", "!", "-e", "/tmp/owned"], session_name="s1") == "[exit code 0]"
    # another name, and the same name in another session, start afresh
    for sid, name in ((session_id, "s2"), (f"{session_id}-other", "s1")):
        assert await text(server, sid, ["pwd"], session_name=name) == "/workspace\n[exit code 0]"
        assert await text(server, sid, bash('echo "${WHO-none}"'), session_name=name) == "none\n[exit code 0]"
        missing = (await run(server, sid, cmd=["greet"], session_name=name)).structured_content
        assert missing["exit_code"] == 127 and "greet: command not found" in missing["stderr"]
    # the unnamed shell keeps today's behaviour: an argv list is a program, not shell syntax
    unnamed = (await run(server, session_id, cmd=["cd", "/tmp"])).structured_content
    assert unnamed["exit_code"] == 127 and "command not found: cd" in unnamed["stderr"]
    assert await text(server, session_id, ["pwd"]) == "/workspace\n[exit code 0]"


async def test_env_and_workdir_apply_to_one_call_only(server: Service, session_id: str) -> None:
    await text(server, session_id, ["mkdir", "-p", "sub/dir"])
    got = await text(server, session_id, bash('echo "$PWD $GREETING"'), workdir="sub/dir", env={"GREETING": "hi"})
    assert got == "/workspace/sub/dir hi\n[exit code 0]"
    assert await text(server, session_id, bash('echo "$PWD ${GREETING-gone}"')) == "/workspace gone\n[exit code 0]"
    assert await text(server, session_id, ["pwd"], workdir="/tmp") == "/tmp\n[exit code 0]"


async def test_commands_run_as_the_default_user_or_an_allowed_one(server: Service, session_id: str) -> None:
    assert await text(server, session_id, ["id", "-un"]) == "sandbox\n[exit code 0]"
    assert await text(server, session_id, ["id", "-un"], user="nobody") == "nobody\n[exit code 0]"
    refused = await run(server, session_id, cmd=["id"], user="root")
    assert refused.is_error and "user 'root' is not allowed here" in refused.content[0].text


async def test_a_timeout_kills_the_whole_process_tree(server: Service, session_id: str) -> None:
    script = "sleep 300 & (sleep 301 &) ; setsid sleep 302 & bash -c 'sleep 303' ; echo never"
    # a guard against a hang (the call waiting on a sleep), not a measure of speed: the bench measures that
    result = await asyncio.wait_for(run(server, session_id, cmd=bash(script), timeout=1), 60)
    assert result.structured_content["timed_out"] is True and result.structured_content["exit_code"] is None
    assert "[timed out after 1 s" in result.content[0].text and "never" not in result.content[0].text
    left = await text(server, session_id, ["ps", "-eo", "comm="])
    assert "sleep" not in left  # every sleep, including the re-parented and setsid ones
    assert await text(server, session_id, ["echo", "still usable"]) == "still usable\n[exit code 0]"


async def test_a_timeout_past_the_server_maximum_is_capped_and_said(server: Service, session_id: str) -> None:
    result = await run(server, session_id, cmd=["true"], timeout=10_000)
    assert result.content[0].text == "[exit code 0]\n[timeout capped at 8 s]"
    bad = await run(server, session_id, cmd=["true"], timeout=-1)
    assert bad.is_error and "positive" in bad.content[0].text


async def test_huge_output_keeps_head_and_tail_with_a_note(server: Service, session_id: str) -> None:
    result = await run(server, session_id, cmd=["python3", "-c", "print('HEAD' + 'x' * 100000 + 'TAIL')"])
    out = result.structured_content["stdout"]
    assert result.structured_content["truncated"] is True
    assert out.startswith("HEADxxx") and out.endswith("xxTAIL\n")
    assert "[... 98009 bytes cut here ...]" in out and len(out) < 2100


async def test_binary_output_is_decoded_with_replacement_characters(server: Service, session_id: str) -> None:
    result = await run(
        server, session_id, cmd=["python3", "-c", "import sys; sys.stdout.buffer.write(b'ok\\xff\\xfe\\x00end')"]
    )
    assert result.structured_content["stdout"] == "ok\ufffd\ufffd\x00end"
    assert result.structured_content["exit_code"] == 0


async def test_endless_output_stops_at_the_timeout_and_the_call_answers(server: Service, session_id: str) -> None:
    result = await run(server, session_id, cmd=["yes"], timeout=1)
    assert result.structured_content["timed_out"] and result.structured_content["truncated"]
    assert result.structured_content["stdout"].startswith("y\ny\n")


def took_the_container(result: Any, oci_runtime: str) -> bool:
    """Under gVisor the sandbox's kernel is one process to the host's memory and pids limits, so a bomb may take the
    whole container with it: the call says so, and the next one gets a fresh container."""
    return oci_runtime == "runsc" and result.is_error and "the container stopped" in result.content[0].text


async def test_a_memory_bomb_is_killed_and_the_session_lives_on(
    server: Service, session_id: str, oci_runtime: str
) -> None:
    bomb = "a = []\nwhile True: a.append(bytearray(10**7))"
    result = await run(server, session_id, cmd=["python3", "-c", bomb], timeout=8)
    if not took_the_container(result, oci_runtime):
        assert result.structured_content["exit_code"] == 137  # SIGKILL from the memory limit's OOM killer
    assert (await text(server, session_id, ["echo", "alive"])).endswith("alive\n[exit code 0]")


async def test_a_fork_bomb_hits_the_pids_limit_and_is_cleared(
    server: Service, session_id: str, oci_runtime: str
) -> None:
    result = await run(server, session_id, cmd=bash(":(){ :|:& };:"), timeout=2)
    if not took_the_container(result, oci_runtime):
        assert not result.is_error, result.content[0].text
        left = await text(server, session_id, ["ps", "-eo", "comm="])
        assert left.split()[:-2].count("bash") == 0, left
    assert (await text(server, session_id, ["echo", "alive"])).endswith("alive\n[exit code 0]")


async def test_a_background_process_holding_the_output_is_stopped_and_said(server: Service, session_id: str) -> None:
    result = await run(server, session_id, cmd=bash("sleep 100 & echo started"))
    assert result.content[0].text.startswith("started\n[exit code 0]\n[1 background process(es) still held the output")
    detached = await run(server, session_id, cmd=bash("nohup sleep 100 > /dev/null 2>&1 & echo detached"))
    assert detached.content[0].text == "detached\n[exit code 0]"
    assert "sleep" in await text(server, session_id, ["ps", "-eo", "comm="])  # a detached one keeps running


async def test_network_and_the_docker_socket_are_out_of_reach(server: Service, session_id: str) -> None:
    links = await text(server, session_id, ["cat", "/proc/net/dev"])
    assert "lo:" in links and "eth0" not in links  # no interface but loopback
    result = await run(
        server, session_id, cmd=["python3", "-c", "import socket; socket.create_connection(('10.0.0.1', 80), 2)"]
    )
    stderr = result.structured_content["stderr"]
    assert result.structured_content["exit_code"] == 1 and ("unreachable" in stderr or "No route to host" in stderr)
    sock = await run(server, session_id, cmd=bash("[ -e /var/run/docker.sock ] || [ -e /run/docker.sock ]"))
    assert sock.structured_content["exit_code"] == 1  # neither exists


async def test_under_gvisor_the_sandbox_sees_no_host_path_in_its_mounts(
    server: Service, session_id: str, oci_runtime: str
) -> None:
    """Under runc, mountinfo names the engine's /var/lib/docker/containers/<id>/... bind mounts; gVisor hides them."""
    if oci_runtime != "runsc":
        pytest.skip("runc shows the host's paths in mountinfo; this is what gVisor buys")
    mounts = await text(server, session_id, ["cat", "/proc/self/mountinfo"])
    assert "gVisor" in await text(server, session_id, ["dmesg"])
    assert_no_host_paths(mounts)


async def test_the_root_file_system_is_read_only_outside_the_work_dirs(server: Service, session_id: str) -> None:
    result = await run(server, session_id, cmd=["touch", "/usr/x", "/etc/x"])
    stderr = result.structured_content["stderr"]
    assert "Read-only file system" in stderr or "Permission denied" in stderr  # runc's words, gVisor's
    assert await text(server, session_id, ["touch", "/tmp/x", "/workspace/x"]) == "[exit code 0]"


async def test_a_long_command_holds_up_no_other_and_a_burst_leaves_few_agent_threads(
    server: Service, session_id: str
) -> None:
    """The agent answers each request on a thread of its own, kept for the next one while idle (at most a few,
    as threads count against the container's pids limit)."""
    await text(server, session_id, ["true"])
    slow = [
        asyncio.create_task(run(server, session_id, cmd=["sleep", "5"], session_name=f"s{i}", timeout=8))
        for i in range(8)
    ]
    assert await text(server, session_id, ["echo", "quick"]) == "quick\n[exit code 0]"
    assert not any(task.done() for task in slow)
    assert [result.content[0].text for result in await asyncio.gather(*slow)] == ["[exit code 0]"] * 8
    threads = (await text(server, session_id, ["ps", "-eLo", "comm="])).splitlines()
    assert 1 < threads.count("python3") <= 5  # the agent's main thread and at most 4 idle ones, one of them answering


async def test_concurrent_sessions_are_isolated(server: Service, session_id: str) -> None:
    async def one(i: int) -> str:
        sid = f"{session_id}-{i}"
        await text(server, sid, bash(f"echo {i} > mine"))
        return await text(server, sid, bash("cat mine; ls | wc -l; hostname"))

    outs = await asyncio.gather(*(one(i) for i in range(4)))
    lines = [o.splitlines() for o in outs]
    assert [(ln[0], ln[1]) for ln in lines] == [(str(i), "1") for i in range(4)]
    assert len({ln[2] for ln in lines}) == 4  # four containers


async def test_bad_input_gets_clear_errors(server: Service, session_id: str) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"cmd": []}, "cmd must be a non-empty list"),
        ({"cmd": "ls -la"}, "Input should be a valid list"),
        ({"cmd": ["ls"], "workdir": "/no/such/dir"}, "workdir /no/such/dir does not exist"),
        ({"cmd": ["ls"], "env": {"A=B": "x"}}, "not a valid variable name"),
    ]
    for args, message in cases:
        result = await run(server, session_id, **args)
        assert result.is_error and message in result.content[0].text, (args, result.content[0].text)
    missing = await run(server, session_id, cmd=["no-such-binary", "x"])
    assert (
        not missing.is_error
        and missing.content[0].text == "[stderr]\ncommand not found: no-such-binary\n[exit code 127]"
    )


async def test_long_commands_send_progress_notifications(server: Service, session_id: str) -> None:
    seen: list[float] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append(value)

    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        result = await session.call_tool("exec", {"cmd": ["sleep", "2.5"]}, progress_callback=progress)
    assert result.content[0].text == "[exit code 0]" and seen[:2] == [1, 2]


async def test_hidden_file_tools_take_the_python_tools_arguments(server: Service) -> None:
    """One contract for both sandboxes (`toolkit/sandbox/file_tools.py`): the same names and arguments."""
    async with mcp_session(server.url, "sse") as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    shapes = {name: set(tools[name].input_schema["properties"]) for name in ("write_file", "read_file", "list_files")}
    assert shapes == {
        "write_file": {"path", "data", "offset"},
        "read_file": {"path", "offset", "max_bytes"},
        "list_files": set(),
    }


async def test_files_in_mnt_data_move_in_chunks_and_are_listed(server: Service, session_id: str) -> None:
    """How a platform container's files reach a shell: chunks written at offsets (the directories above made),
    read back from offsets until `eof`, and a listing of /mnt/data's regular files (a symlink out of it is
    not one)."""
    blob = bytes(range(256)) * 40
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        for offset in range(0, len(blob), 4096):
            chunk = base64.b64encode(blob[offset : offset + 4096]).decode()
            args = {"path": "/mnt/data/sub/b.bin", "data": chunk, "offset": offset}
            assert (await session.call_tool("write_file", args)).structured_content == {
                "size": min(len(blob), offset + 4096)
            }
        await session.call_tool("exec", {"cmd": ["ln", "-s", "/etc/passwd", "/mnt/data/leak"]})
        listed = (await session.call_tool("list_files", {})).structured_content
        assert [(f["path"], f["size"]) for f in listed["files"]] == [("sub/b.bin", len(blob))]
        back = b""
        while True:
            args = {"path": "sub/b.bin", "offset": len(back), "max_bytes": 4096}
            part = (await session.call_tool("read_file", args)).structured_content
            back += base64.b64decode(part["data"])
            if part["eof"]:
                break
        assert back == blob
        await session.call_tool("cleanup_session", {})


async def test_file_tools_stay_in_mnt_data_and_follow_no_symlink(server: Service, session_id: str) -> None:
    payload = base64.b64encode(b"x").decode()
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session_id}) as session:
        await session.call_tool("exec", {"cmd": ["ln", "-s", "/tmp", "/mnt/data/out"]})
        await session.call_tool("exec", {"cmd": ["ln", "-s", "/etc/passwd", "/mnt/data/leak"]})
        for path in ("/tmp/x", "../x", "out/x", "leak", "/workspace/x", "/mnt/data"):
            wrote = await session.call_tool("write_file", {"path": path, "data": payload})
            assert wrote.is_error and "path" in wrote.content[0].text, (path, wrote.content)
        refused = await session.call_tool("read_file", {"path": "leak"})
        assert refused.is_error and "symlink" in refused.content[0].text
        missing = await session.call_tool("read_file", {"path": "nope"})
        assert missing.is_error and "No such file or directory" in missing.content[0].text
        bad = await session.call_tool("write_file", {"path": "x", "data": "!!"})
        assert bad.is_error and "not valid base64" in bad.content[0].text
        seen = await session.call_tool("exec", {"cmd": ["ls", "-A", "/tmp", "/workspace"]})
        assert "x" not in seen.content[0].text.split()  # nothing written through a link or outside /mnt/data
        await session.call_tool("cleanup_session", {})
