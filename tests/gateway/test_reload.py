"""The routes file reloads on SIGHUP or when it changes, without dropping calls in flight."""

from __future__ import annotations

import json
import time

import anyio
import httpx

from tests.support.gateway import GatewayProc, call_text, connect, fixtures, gateway_config


def _until(predicate, timeout: float = 10) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.1)


async def _replica_of(gw: GatewayProc, ns: str) -> str:
    async with connect(gw.url(ns), "streamable-http") as client:
        return json.loads(await call_text(client, "whoami"))["replica"]


async def test_sighup_swaps_backends_and_adds_namespaces_without_dropping_calls_in_flight(transport: str) -> None:
    with fixtures("r1", "r2") as (r1, r2):
        gw = GatewayProc(gateway_config({"alpha": [r1.url]}))
        try:
            gw.start()
            results: list[str] = []
            async with connect(gw.url("alpha", transport), transport) as client:
                async with anyio.create_task_group() as tg:

                    async def slow_call() -> None:
                        results.append(await call_text(client, "sleep", {"seconds": 2}))

                    tg.start_soon(slow_call)
                    await anyio.sleep(0.5)
                    gw.reload(gateway_config({"alpha": [r2.url], "beta": [r1.url]}))
                    await anyio.to_thread.run_sync(
                        lambda: _until(lambda: httpx.get(f"{gw.base}/beta/mcp", trust_env=False).status_code != 404)
                    )
            assert results == ["slept"]
            assert await _replica_of(gw, "alpha") == "r2"
            assert await _replica_of(gw, "beta") == "r1"
            async with connect(gw.url("beta", transport), transport) as client:
                assert client.server_info is not None and client.server_info.name == "beta"
            gw.reload(gateway_config({"alpha": [r2.url]}))
            await anyio.to_thread.run_sync(
                lambda: _until(lambda: httpx.get(f"{gw.base}/beta/mcp", trust_env=False).status_code == 404)
            )
        finally:
            gw.close()


async def test_a_broken_config_is_refused_and_the_running_one_kept() -> None:
    with fixtures("r1") as (r1,):
        gw = GatewayProc(gateway_config({"alpha": [r1.url]}), watch_s=0.2)
        try:
            gw.start()
            gw.config_path.write_text("namespaces: {alpha: {replicas: []}}\n")  # invalid: no replica
            await anyio.to_thread.run_sync(lambda: _until(lambda: "config.reload_failed" in gw.logs()))
            assert await _replica_of(gw, "alpha") == "r1"
            gw.write(gateway_config({"alpha": [r1.url], "gamma": [r1.url]}))  # picked up by the file watcher
            await anyio.to_thread.run_sync(
                lambda: _until(lambda: httpx.get(f"{gw.base}/gamma/mcp", trust_env=False).status_code != 404)
            )
        finally:
            gw.close()
