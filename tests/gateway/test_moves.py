"""Python sessions move between replicas with their state: a drained replica hands them over, a killed one's
handles are taken up from their snapshots.

Two real python servers (local backend) sharing a `dir` snapshot store, behind a real gateway on loopback. Both
start on replica A (B is started once they are placed): a 2025-era client's MCP session carrying `x-session-id`,
and a 2026-07-28 client's session handle, each with variables, a function and a file in /mnt/data. On SIGTERM A
saves both and lets them go at once; their next calls land on B, which restores them and says so in its notice
(never the reset notice). A SIGKILLed replica cannot save anything: a handle whose state it had snapshotted (idle
reaping here) is restored on B, one whose snapshot was refused keeps the clear "lost with its replica" error.
With `restore_lost` (the namespace's replicas share a store), a killed replica's x-session-id session is placed
on B too, which restores it from its last background snapshot.
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.support.asgi import free_port
from tests.support.gateway import GatewayProc, connect, gateway_config, running_gateway
from tests.support.service import Service, running_service, wait_until

SETUP = (
    "import json\n"
    "x = {'a': [1, 2]}\n"
    "def f(n):\n    return n * x['a'][1]\n"
    "open('/mnt/data/note.txt', 'w').write('kept')\n"
    "'set'"
)
CHECK = "print(x, f(3), open('/mnt/data/note.txt').read(), json.dumps([1]))"
CHECKED = "{'a': [1, 2]} 6 kept [1]"
RESTORED = "[restored from a snapshot of "
NOT_RESTORED = " UTC; not restored: running processes, open files]\n"


def replica(store: Path, port: int, *extra: str) -> contextlib.AbstractContextManager[Service]:
    """A python replica on the shared store, background saves off (unless `extra` turns them on): what moves is
    what the drain or reap saved."""
    args = ["-m", "tools.python_sandbox", "--backend", "local", "--pool-size", "0", "--timeout-s", "10"]
    store_args = ["--snapshots", "dir", "--snapshot-dir", str(store), "--snapshot-every-s", "0"]
    return running_service([*args, *store_args, *extra], port=port)


@contextlib.contextmanager
def fleet(store: Path, *a_extra: str, restore_lost: bool = False) -> Iterator[tuple[Service, int, GatewayProc]]:
    """Replica A running, B's port reserved (not yet listening) and a gateway routing python to both."""
    a_port, b_port = free_port(), free_port()
    urls = [f"http://127.0.0.1:{port}/mcp" for port in (a_port, b_port)]
    cfg = gateway_config({"python": urls})
    cfg["namespaces"]["python"]["restore_lost"] = restore_lost
    with replica(store, a_port, *a_extra) as a, running_gateway(cfg) as gw:
        yield a, b_port, gw


def calls_of(log: str, key: str) -> list[str]:
    """The replica of each tool call of session `key` the gateway answered, in order (a call that minted a handle
    is logged by no session: its handle's pin stands for it)."""
    replicas = []
    for line in log.splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            called = rec.get("event") == "gateway.request" and rec.get("method") == "tools/call"
            if (called or rec.get("event") == "session.pinned") and rec.get("session_id") == key:
                replicas.append(rec["replica"])
    return replicas


def held(server: Service) -> int | None:
    """How many sessions the server holds; None once it stopped listening."""
    try:
        return int(httpx.get(f"{server.url}/healthz", timeout=5, trust_env=False).json()["sessions"])
    except httpx.HTTPError:
        return None


def text_of(result: Any) -> str:
    return str(result.content[0].text)


async def new_handle(client: Any) -> str:
    result = await client.call_tool("python", {"code": SETUP, "session_handle": "new"})
    assert not result.is_error and text_of(result).endswith("'set'"), text_of(result)
    return str(result.structured_content["session_handle"])


async def test_a_drained_replica_hands_its_sessions_over_and_the_next_calls_restore_them(tmp_path: Path) -> None:
    with fleet(tmp_path, "--drain-s", "3") as (a, b_port, gw):
        url, a_url = gw.url("python"), f"{a.url}/mcp"
        async with (
            connect(url, "streamable-http", headers={"x-session-id": "conv-moves"}, mode="legacy") as old,
            connect(url, "streamable-http") as modern,
        ):
            assert text_of(await old.call_tool("python", {"code": SETUP})) == "'set'"
            handle = await new_handle(modern)
            assert calls_of(gw.logs(), "conv-moves") == [a_url] and calls_of(gw.logs(), handle) == [a_url]
            with replica(tmp_path, b_port) as b:
                a.proc.send_signal(signal.SIGTERM)
                assert wait_until(lambda: held(a) in (0, None)), "the drain saved and released both sessions"
                moved = text_of(await old.call_tool("python", {"code": CHECK}))
                taken_up = await modern.call_tool("python", {"code": CHECK, "session_handle": handle})
                again = text_of(await old.call_tool("python", {"code": "f(5)"}))
                a.proc.wait(30)
                a_log = a.log()
                assert held(b) == 2
        gw.stop()
        log = gw.logs()
    b_url = f"{b.url}/mcp"
    for text in (moved, text_of(taken_up)):
        assert text.startswith(RESTORED) and NOT_RESTORED in text and text.endswith(CHECKED), text
        assert "state was" not in text  # no reset notice beside the restore
    assert taken_up.structured_content["session_handle"] == handle
    assert again == "10"  # told once; the state lives on B
    assert calls_of(log, "conv-moves") == [a_url, b_url, b_url] and calls_of(log, handle) == [a_url, b_url]
    assert a_log.count('"snapshot.saved"') == 2 and '"handed_over": 2' in a_log, a_log[-3000:]


async def test_a_killed_replicas_handle_is_restored_from_its_snapshot_and_one_without_is_named_lost(
    tmp_path: Path,
) -> None:
    """A reaps (and so saves) a session idle for a second; the big one's snapshot is over the cap: not saved."""
    reaping = ["--session-ttl-s", "1", "--reap-interval-s", "0.2", "--snapshot-max-mib", "1"]
    with fleet(tmp_path, *reaping) as (a, b_port, gw):
        async with connect(gw.url("python"), "streamable-http") as client:
            saved = await new_handle(client)
            big = await new_handle(client)
            await client.call_tool("python", {"code": "big = bytes(2 * 2**20)", "session_handle": big})
            assert {calls_of(gw.logs(), saved)[0], calls_of(gw.logs(), big)[0]} == {f"{a.url}/mcp"}
            assert wait_until(lambda: held(a) == 0), "A reaped both sessions"
            with replica(tmp_path, b_port, *reaping) as b:  # the same flags: the same tool listing
                a.stop(signal.SIGKILL)
                restored = await client.call_tool("python", {"code": CHECK, "session_handle": saved})
                lost = await client.call_tool("python", {"code": "1", "session_handle": big})
        gw.stop()
        log = gw.logs()
    text = text_of(restored)
    assert not restored.is_error and text.startswith(RESTORED) and text.endswith(CHECKED), text
    assert calls_of(log, saved) == [f"{a.url}/mcp", f"{b.url}/mcp"]
    words = f"session handle {big!r} was lost with its replica (the server that held it went away)"
    assert lost.is_error and words in text_of(lost), text_of(lost)


async def test_with_restore_lost_a_killed_replicas_x_session_id_session_comes_back_from_its_background_save(
    tmp_path: Path,
) -> None:
    """Without `restore_lost` this session's calls get "session ... was lost" (tests/gateway/test_failures.py)."""
    background = ["--snapshot-every-s", "0.2"]
    with fleet(tmp_path, *background, restore_lost=True) as (a, b_port, gw):
        headers = {"x-session-id": "conv-killed"}
        async with connect(gw.url("python"), "streamable-http", headers=headers, mode="legacy") as client:
            assert text_of(await client.call_tool("python", {"code": SETUP})) == "'set'"
            assert wait_until(lambda: '"trigger": "background"' in a.log()), "A saved the session in the background"
            with replica(tmp_path, b_port, *background) as b:
                a.stop(signal.SIGKILL)
                moved = text_of(await client.call_tool("python", {"code": CHECK}))
                again = text_of(await client.call_tool("python", {"code": "f(5)"}))
                restores = [line for line in b.log().splitlines() if '"snapshot.restored"' in line]
        gw.stop()
        log = gw.logs()
    assert moved.startswith(RESTORED) and NOT_RESTORED in moved and moved.endswith(CHECKED), moved
    assert "state was" not in moved and again == "10"  # told once, and no reset notice beside the restore
    assert calls_of(log, "conv-killed") == [f"{a.url}/mcp", f"{b.url}/mcp", f"{b.url}/mcp"]
    assert len(restores) == 1 and '"trigger": "background"' in restores[0], restores
