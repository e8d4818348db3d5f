"""The health verdict: a probe's failure counts once, and never against a replica that is answering calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.config import parse_config
from gateway.health import probe
from gateway.lifecycle import build_gateway
from gateway.service import Gateway
from gateway.upstream import Replica


@pytest.fixture
async def silent_replica() -> AsyncIterator[str]:
    """A replica that accepts connections and never answers: what a starved machine looks like to a probe."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/mcp"
    server.close()


def _gateway(url: str) -> tuple[Gateway, Replica]:
    health = "{interval_s: 600, timeout_s: 0.2, failures_to_open: 2, open_s: 600}"
    gw = build_gateway(parse_config(f"namespaces: {{slow: {{replicas: ['{url}']}}}}\nhealth: {health}"))
    ns = gw.namespaces["slow"]
    return gw, ns.replicas[url]


async def test_a_probe_that_times_out_counts_one_failure_not_two(silent_replica: str) -> None:
    gw, replica = _gateway(silent_replica)
    await probe(gw, gw.namespaces["slow"], replica)
    assert (replica.failures, replica.healthy) == (1, True)  # two would open the circuit on one slow answer
    await probe(gw, gw.namespaces["slow"], replica)
    assert (replica.failures, replica.healthy) == (2, False)
    gw.client.close()


async def test_a_probe_that_times_out_while_calls_are_answered_judges_no_one(silent_replica: str) -> None:
    gw, replica = _gateway(silent_replica)
    downs: list[Replica] = []
    replica.on_down = downs.append

    async def calls_answered() -> None:
        while True:
            await asyncio.sleep(0.05)
            replica.record_success()  # what a call's answer does (`upstream.open_stream`)

    answering = asyncio.ensure_future(calls_answered())
    try:
        for _ in range(3):
            await probe(gw, gw.namespaces["slow"], replica)
    finally:
        answering.cancel()
    assert (replica.failures, replica.healthy, downs) == (0, True, [])
    gw.client.close()
