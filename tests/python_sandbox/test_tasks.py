"""MCP Tasks (2026-07-28 `io.modelcontextprotocol/tasks`) on the python tool, through the gateway.

Two real python tool replicas (local backend: real bwrap sandboxes) counting their tasks in a real Redis, behind
a real gateway, spoken to in raw 2026-07-28 JSON-RPC over httpx (the MCP SDK's client does not speak the tasks
extension). A long call becomes a task that is polled to completion, or cancelled, which kills the sandbox's
process; an owner's running tasks are limited across both replicas; an unknown, forged or another owner's task
id gets one error; a SIGTERM'd replica lets its task finish, refuses new ones, fails the one left at its drain's
deadline with the reason (its process killed), and once it is gone its tasks get a clear error. The kit's lean
client (`McpClient`, the orchestrator's) declares the extension with an inline threshold: a short call is
answered inline, a longer one is told as a task and polled to its real result, cancelled, or reported lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import signal
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import TypeAdapter

from tests.python_sandbox.conftest import server_args
from tests.support.gateway import GatewayProc, eventually, gateway_config, running_gateway
from tests.support.redis import redis_server
from tests.support.service import Service, running_service
from toolkit.mcpwire.client import McpClient, TaskEnded, TaskLost
from toolkit.mcpwire.http import Pool, Timeouts
from toolkit.tasks import EXTENSION
from toolkit.wire import INSTANCE_HEADER, OWNER_HEADER, SECRET_ENV, sign_owner, task_instance

SECRET = secrets.token_hex(16)
MCP = "io.modelcontextprotocol"
ACCEPT = {"accept": "application/json, text/event-stream"}


@dataclass
class Fleet:
    replicas: list[Service]
    gateway: GatewayProc
    instances: list[str]
    """Each replica's instance id, as its answers say."""

    @property
    def url(self) -> str:
        return self.gateway.url("python")


LIMIT = 4
"""Tasks an owner runs at once, across the fleet."""
DRAIN_S = 6.0
"""The second replica's drain: the last test SIGTERMs it."""


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    env = {SECRET_ENV: SECRET}
    label = f"tasks-{uuid.uuid4().hex[:8]}"
    with redis_server() as redis_url:
        limits = ("--task-counts-url", redis_url, "--max-tasks-per-owner", str(LIMIT))
        with _fleet(label, env, limits) as fleet:
            yield fleet


@contextlib.contextmanager
def _fleet(label: str, env: dict[str, str], limits: tuple[str, ...]) -> Iterator[Fleet]:
    b_args = server_args("local", f"{label}-b", *limits, "--drain-s", str(DRAIN_S), timeout_s=60)
    with (
        running_service(server_args("local", f"{label}-a", *limits, timeout_s=60), env=env) as a,
        running_service(b_args, env=env) as b,
        running_gateway(gateway_config({"python": [f"{a.url}/mcp", f"{b.url}/mcp"]}), env=env) as gw,
    ):
        yield Fleet([a, b], gw, [httpx.get(f"{r.url}/healthz").headers[INSTANCE_HEADER] for r in (a, b)])


def _rpc(url: str, method: str, params: dict[str, Any], owner: str = "alice", *, tasks: bool = True) -> Any:
    """One 2026-07-28 request (declaring the tasks extension unless told not to); its JSON-RPC answer."""
    declared = {"extensions": {EXTENSION: {}}} if tasks else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": declared,
    }
    name = params.get("name") or params.get("taskId")
    headers = {**ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": method, "mcp-name": str(name)}
    headers[OWNER_HEADER] = sign_owner(owner, SECRET.encode())
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    return httpx.post(url, json=body, headers=headers, timeout=60).json()


def _start(url: str, code: str, owner: str = "alice") -> dict[str, Any]:
    answer = _rpc(url, "tools/call", {"name": "python", "arguments": {"code": code}}, owner)
    assert answer["result"]["resultType"] == "task", answer
    return answer["result"]


async def _settled(url: str, task_id: str) -> dict[str, Any]:
    """Poll `tasks/get` (as a client would, at the answer's pace) until the task ends."""
    seen: dict[str, Any] = {}

    def ended() -> bool:
        seen.update(_rpc(url, "tasks/get", {"taskId": task_id})["result"])
        return seen["status"] in ("completed", "failed", "cancelled")

    await eventually(ended, 60, f"task {task_id} ended")
    return seen


async def test_a_long_call_is_a_task_polled_to_completion_through_the_gateway(fleet: Fleet) -> None:
    created = [_start(fleet.url, f"import time; time.sleep(1); print('done', {n})") for n in range(4)]
    instances = {task_instance(t["taskId"]) for t in created}
    assert instances == set(fleet.instances)  # the gateway spread them; each id names the replica that runs it
    for n, task in enumerate(created):
        assert task["status"] == "working" and task["ttlMs"] > 0, task
        done = await _settled(fleet.url, task["taskId"])
        assert done["status"] == "completed", done
        assert f"done {n}" in done["result"]["content"][0]["text"]


def test_a_client_without_the_extension_gets_the_answer_itself(fleet: Fleet) -> None:
    answer = _rpc(fleet.url, "tools/call", {"name": "python", "arguments": {"code": "print(6*7)"}}, tasks=False)
    assert answer["result"].get("resultType") != "task" and "42" in answer["result"]["content"][0]["text"]
    refused = _rpc(fleet.url, "tasks/get", {"taskId": "x"}, tasks=False)
    assert "error" in refused, refused


def _sleeping(marker: str) -> str:
    """Code whose child process sleeps 600 s, found by `marker` in its command line."""
    return f"import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])"


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


async def test_a_cancelled_task_kills_its_sandbox_process(fleet: Fleet) -> None:
    marker = f"toolfleet-task-{uuid.uuid4().hex}"
    code = _sleeping(marker)
    task = _start(fleet.url, code)
    await eventually(lambda: bool(_processes_with(marker)), 30, "the task's process started")
    assert _rpc(fleet.url, "tasks/cancel", {"taskId": task["taskId"]})["result"]["resultType"] == "complete"
    assert (await _settled(fleet.url, task["taskId"]))["status"] == "cancelled"
    await eventually(lambda: not _processes_with(marker), 30, "the task's process was killed")


def test_unknown_forged_and_foreign_task_ids_get_one_error(fleet: Fleet) -> None:
    mine = _start(fleet.url, "print(1)")["taskId"]
    instance, _, _ = mine.split(".")
    forged = f"{instance}.{'0' * 32}.{'0' * 32}"
    errors = [
        _rpc(fleet.url, "tasks/get", {"taskId": mine}, owner="mallory")["error"],
        _rpc(fleet.url, "tasks/cancel", {"taskId": mine}, owner="mallory")["error"],
        _rpc(fleet.url, "tasks/get", {"taskId": forged})["error"],
        _rpc(fleet.url, "tasks/get", {"taskId": "not-a-task"})["error"],
    ]
    assert {e["code"] for e in errors} == {-32602}, errors
    words = {e["message"].split(": ", 1)[1] for e in errors}
    assert len(words) == 1 and "no task of this caller has that id" in words.pop(), errors
    assert _rpc(fleet.url, "tasks/get", {"taskId": mine})["result"]["taskId"] == mine  # its owner still may


def _lean(fleet: Fleet, pool: Pool, inline_ms: int | None, owner: str = "alice") -> McpClient:
    headers = {OWNER_HEADER: sign_owner(owner, SECRET.encode())}
    return McpClient(pool, fleet.url, headers, timeouts=Timeouts(connect=5.0, read=60.0), inline_ms=inline_ms)


async def test_the_lean_client_answers_a_short_call_inline_and_polls_a_long_one_as_a_task(fleet: Fleet) -> None:
    pool, told = Pool(), []

    async def on_task(task_id: str) -> None:
        told.append(task_id)

    try:
        client = _lean(fleet, pool, inline_ms=800)
        short = await client.call_tool("python", {"code": "print(6*7)"}, on_task)
        assert told == [] and "42" in short["content"][0]["text"], short
        long = await client.call_tool("python", {"code": "import time; time.sleep(2); print('slept')"}, on_task)
        assert len(told) == 1 and task_instance(told[0]) in fleet.instances, told
        assert "slept" in long["content"][0]["text"] and not long.get("isError"), long
        again = await _lean(fleet, pool, None).task_result(told[0])  # followed by a client that did not start it
        assert again["content"] == long["content"], again
        with pytest.raises(TaskLost, match="no task of this caller"):  # another owner's id reads as unknown
            await _lean(fleet, pool, 800, owner="mallory").task_result(told[0])
    finally:
        pool.close()


async def test_the_lean_client_cancels_its_task_and_the_poll_ends_cancelled(fleet: Fleet) -> None:
    marker = f"toolfleet-lean-{uuid.uuid4().hex}"
    code = f"import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])"
    pool, told = Pool(), []

    async def on_task(task_id: str) -> None:
        told.append(task_id)

    try:
        client = _lean(fleet, pool, inline_ms=0)  # no wait: a task at once
        polled = asyncio.create_task(client.call_tool("python", {"code": code}, on_task))
        await eventually(lambda: bool(told and _processes_with(marker)), 30, "the task's process started")
        await client.cancel_task(told[0])
        with pytest.raises(TaskEnded, match="cancelled"):
            await polled
        await eventually(lambda: not _processes_with(marker), 30, "the task's process was killed")
    finally:
        pool.close()


async def test_an_owners_running_tasks_are_limited_across_the_replicas(fleet: Fleet) -> None:
    started: list[str] = []
    try:
        for _ in range(LIMIT):
            started.append(_start(fleet.url, "import time; time.sleep(600)", owner="carol")["taskId"])
        assert {task_instance(t) for t in started} == set(fleet.instances)  # neither replica alone holds LIMIT
        refused = _rpc(fleet.url, "tools/call", {"name": "python", "arguments": {"code": "print(1)"}}, "carol")
        assert f"this caller runs {LIMIT} tasks across the fleet, its limit" in refused["error"]["message"], refused
        assert _start(fleet.url, "print(1)", owner="erin")["status"] == "working"  # another owner is not limited
        _rpc(fleet.url, "tasks/cancel", {"taskId": started.pop()}, "carol")
        await eventually(lambda: "result" in _rpc(fleet.url, "tools/call", _code("print(3)"), "carol"), 30, "a place")
    finally:
        for task_id in started:
            _rpc(fleet.url, "tasks/cancel", {"taskId": task_id}, "carol")


def _code(code: str) -> dict[str, Any]:
    return {"name": "python", "arguments": {"code": code}}


ANSWER = TypeAdapter(dict[str, Any])


class TaskCreated(Result):
    """What a task-augmented `tools/call` answers (SEP-2663's CreateTaskResult)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class TaskIdParams(RequestParams):
    task_id: str


class TaskRequest(Request[TaskIdParams, str]):
    name_param = "taskId"  # SEP-2663: tasks/* carry the task id as their Mcp-Name


class TaskPoller(ClientExtension):
    """The tasks extension for the `mcp` SDK's `Client` (which ships none): a task the server answers is polled
    to its end as `tasks/get` paces it, and cancelled with `tasks/cancel` when its caller gives up."""

    identifier = EXTENSION

    def __init__(self) -> None:
        self.seen: list[str] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=TaskCreated, resolve=self._resolve),)

    async def _resolve(self, created: TaskCreated, ctx: ClaimContext) -> CallToolResult:
        self.seen.append(created.task_id)
        ask = functools.partial(self._send, ctx.session, created.task_id)
        try:
            while True:
                task = await ask("tasks/get")
                if task["status"] in ("completed", "failed", "cancelled"):
                    break
                await anyio.sleep(task["pollIntervalMs"] / 1000)  # the pace the server asks of its pollers
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await ask("tasks/cancel")
            raise
        if task["status"] != "completed":
            raise RuntimeError(f"task {created.task_id} ended {task['status']}: {task.get('error')}")
        return CallToolResult.model_validate(task["result"])

    @staticmethod
    async def _send(session: Any, task_id: str, method: str) -> dict[str, Any]:
        request = TaskRequest(method=method, params=TaskIdParams(task_id=task_id))
        answer: dict[str, Any] = await session.send_request(request, ANSWER)
        return answer


async def test_the_mcp_sdk_client_with_a_tasks_extension_polls_a_task_and_cancels_it_when_it_gives_up(
    fleet: Fleet,
) -> None:
    poller = TaskPoller()
    async with Client(fleet.url, extensions=[poller]) as client:
        done = await client.call_tool("python", {"code": "import time; time.sleep(1); print('via sdk')"})
        assert "via sdk" in done.content[0].text and len(poller.seen) == 1  # type: ignore[union-attr]
        marker = f"toolfleet-sdk-{uuid.uuid4().hex}"
        code = _sleeping(marker)
        with anyio.move_on_after(600) as gave_up:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "python", {"code": code})
                await eventually(lambda: bool(_processes_with(marker)), 30, "the task's process started")
                tg.cancel_scope.cancel()  # the caller gives up: the extension cancels the task
        assert not gave_up.cancel_called
        assert (await TaskPoller._send(client.session, poller.seen[1], "tasks/get"))["status"] == "cancelled"
    await eventually(lambda: not _processes_with(marker), 30, "the given-up task's process was killed")


async def test_a_draining_replica_finishes_its_task_fails_the_one_left_and_then_its_tasks_are_lost(
    fleet: Fleet,
) -> None:
    """Last in the module: it stops a replica."""
    victim, instance = fleet.replicas[1], fleet.instances[1]
    direct = f"{victim.url}/mcp"
    marker = f"toolfleet-drain-{uuid.uuid4().hex}"
    finishing = _start(direct, "import time; time.sleep(2); print('finished')")["taskId"]
    left = _start(direct, _sleeping(marker))
    await eventually(lambda: bool(_processes_with(marker)), 30, "the left task's process started")
    victim.proc.send_signal(signal.SIGTERM)  # the server alone: its sandboxes are its to stop
    await eventually(lambda: "error" in _rpc(direct, "tools/call", _code("print(4)")), 10, "the drain began")
    assert _rpc(direct, "tools/call", _code("print(4)"))["error"]["code"] == -32001  # the draining answer
    assert task_instance(_start(fleet.url, "print(5)")["taskId"]) != instance  # the gateway places it elsewhere
    done = await _settled(fleet.url, finishing)
    assert done["status"] == "completed" and "finished" in done["result"]["content"][0]["text"], done
    failed = await _settled(fleet.url, left["taskId"])
    assert failed["status"] == "failed" and f"its drain ({DRAIN_S:g} s) ended" in failed["error"]["message"], failed
    await eventually(lambda: not _processes_with(marker), 30, "the left task's process was killed")
    await eventually(lambda: victim.proc.poll() is not None, 30, "the drained replica exited")

    def lost() -> bool:
        error = _rpc(fleet.url, "tasks/get", {"taskId": finishing}).get("error") or {}
        return "the replica of 'python' that ran it is gone" in error.get("message", "")

    await eventually(lost, 30, "the task was reported lost")
