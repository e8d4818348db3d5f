"""A python replica told to stop (SIGTERM) while conversations call through the gateway loses no call.

Two real python servers (local backend) and a real gateway on loopback. Conversations call the way the
orchestrator does: each turn a new MCP session with the conversation's `x-session-id`. One replica gets
SIGTERM while every conversation calls in a loop and new conversations keep starting. It drains: the
conversations it held keep their state through the grace period, new ones go to the other replica; when it
stops, its conversations go on on the other replica, whose first answer says their state was reset.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import uuid
from dataclasses import dataclass, field

import anyio
import httpx
import pytest

from tests.support.gateway import call_text, connect, gateway_config, running_gateway
from tests.support.service import Service, running_service

GRACE_S = 3.0
RESET = "[this session's state was lost with its replica (the server that held it shut down)"
STEP = "try:\n    n += 1\nexcept NameError:\n    n = 1\nprint(n)"
"""Counts this session's turns."""


@dataclass
class Conversation:
    sid: str = field(default_factory=lambda: f"conv_{uuid.uuid4().hex[:12]}")
    started: float = field(default_factory=time.monotonic)
    turns: list[tuple[int, bool, float]] = field(default_factory=list)
    """(count, reset notice, when it began) per answered turn."""
    replicas: list[str] = field(default_factory=list)
    """The replica of each turn, from the gateway's log."""


async def turn(gateway_url: str, conv: Conversation) -> None:
    began = time.monotonic()
    async with connect(gateway_url, "streamable-http", headers={"x-session-id": conv.sid}) as client:
        result = await client.call_tool("python", {"code": STEP})
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    conv.turns.append((int(text.splitlines()[-1]), text.startswith(RESET), began))


def replicas_of(log: str, convs: list[Conversation]) -> None:
    """Each conversation's replica per turn, as the gateway logged its calls (in the order they ended)."""
    by_sid = {c.sid: c for c in convs}
    for line in log.splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if rec.get("event") == "gateway.request" and rec.get("method") == "tools/call":
                assert rec["outcome"] == "ok", rec
                if (conv := by_sid.get(rec.get("session_id"))) is not None:
                    conv.replicas.append(rec["replica"])


def python_replica() -> contextlib.AbstractContextManager[Service]:
    args = ["-m", "tools.python_sandbox", "--backend", "local", "--drain-s", str(GRACE_S), "--pool-size", "0"]
    return running_service(args)


async def test_a_replica_told_to_stop_drains_and_no_call_is_lost() -> None:
    with python_replica() as a, python_replica() as b:
        cfg = gateway_config({"python": [f"{a.url}/mcp", f"{b.url}/mcp"]})
        with running_gateway(cfg) as gw:
            url = gw.url("python")
            held = [Conversation() for _ in range(4)]
            for conv in held:
                await turn(url, conv)
            newcomers: list[Conversation] = []
            stopped = anyio.Event()

            async def keep_calling(conv: Conversation) -> None:
                while not stopped.is_set():
                    await turn(url, conv)
                    await anyio.sleep(0.05)
                await turn(url, conv)  # once more after the drained replica stopped

            async def keep_starting() -> None:
                while not stopped.is_set():
                    newcomers.append(Conversation())
                    await turn(url, newcomers[-1])
                    await anyio.sleep(0.1)

            async with anyio.create_task_group() as tg:
                for conv in held:
                    tg.start_soon(keep_calling, conv)
                tg.start_soon(keep_starting)
                await anyio.sleep(0.5)
                a.proc.send_signal(signal.SIGTERM)
                t0, signalled = anyio.current_time(), time.monotonic()
                async with httpx.AsyncClient(trust_env=False) as http:
                    assert (await http.get(f"{a.url}/readyz")).status_code == 503  # unready at once
                    assert (await http.get(f"{a.url}/healthz")).json()["draining"] is True
                await anyio.to_thread.run_sync(a.proc.wait, 30)  # uvicorn ends by re-raising SIGTERM
                drained_s = anyio.current_time() - t0
                await anyio.sleep(0.5)
                stopped.set()
            gw.stop()
            replicas_of(gw.logs(), held + newcomers)

    assert drained_s >= GRACE_S  # it held sessions: it served them through the whole grace period
    a_url, b_url = f"{a.url}/mcp", f"{b.url}/mcp"
    on_a = [c for c in held if c.replicas[0] == a_url]
    assert on_a and len(on_a) < len(held), "new sessions are spread over both replicas"
    for conv in held:
        assert len(conv.replicas) == len(conv.turns)
        counts, resets, began = zip(*conv.turns, strict=True)
        if conv not in on_a:
            assert list(counts) == list(range(1, len(counts) + 1)) and not any(resets)
            continue
        moved = conv.replicas.index(b_url)
        assert began[moved - 1] > signalled, "the drained replica kept serving its sessions' follow-up calls"
        # Its state held to the end on the drained replica; the first call on the other says it was reset.
        assert list(counts[:moved]) == list(range(1, moved + 1)) and set(conv.replicas[moved:]) == {b_url}
        assert resets[moved] and counts[moved] == 1 and not any(resets[:moved]) and not any(resets[moved + 1 :])
    # Every turn was answered (`turn` raises otherwise); new conversations once the drain began went to b
    # (one the gateway sent to a before it heard was refused there and placed on b).
    after = [c for c in newcomers if c.started > signalled + 1.0]
    assert after and {c.replicas[0] for c in after} == {b_url}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_open_mcp_session_moves_with_its_key_when_its_replica_drains(mode: str) -> None:
    """A client whose replica drained and stopped goes on: the next call on the other replica says the state was
    reset, whether the call finds the replica gone itself or the gateway knew already. A 2025 client keeps its
    MCP session: the gateway opens a new upstream session for it on the other replica; a 2026-07-28 one has none."""
    with python_replica() as a, python_replica() as b:
        cfg = gateway_config({"python": [f"{a.url}/mcp", f"{b.url}/mcp"]})
        with running_gateway(cfg) as gw:
            url, a_url = gw.url("python"), f"{a.url}/mcp"
            convs: list[Conversation] = []
            while sum(c.replicas == [a_url] for c in convs) < 2:  # the first two conversations placed on a
                convs.append(Conversation())
                await turn(url, convs[-1])
                replicas_of(gw.logs(), convs[-1:])
            on_a = [c for c in convs if c.replicas == [a_url]]
            async with contextlib.AsyncExitStack() as stack:
                clients = [
                    await stack.enter_async_context(
                        connect(url, "streamable-http", headers={"x-session-id": c.sid}, mode=mode)
                    )
                    for c in on_a
                ]
                a.proc.send_signal(signal.SIGTERM)
                for client in clients:  # served through the grace period, where the gateway hears a drains
                    assert (await call_text(client, "python", {"code": STEP})).splitlines()[-1] == "2"
                await anyio.to_thread.run_sync(a.proc.wait, 30)
                texts = [await call_text(client, "python", {"code": STEP}) for client in clients]
            gw.stop()
            log = gw.logs()
    for text in texts:
        assert text.startswith(RESET) and text.splitlines()[-1] == "1", text
    assert log.count('"session.reopened"') == (2 if mode == "legacy" else 0), log[-3000:]
