"""Replica discovery by DNS: every address of a name is a replica; replicas come and go as the answer does."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from gateway.app import build_app
from gateway.config import parse_config
from gateway.discovery import refresh
from gateway.errors import SessionLost
from gateway.health import probe_all, probe_forever
from gateway.keys import SessionKey
from gateway.lifecycle import build_gateway
from gateway.service import Gateway
from gateway.store import MemoryStore
from tests.support.asgi import free_port, serve_asgi
from tests.support.gateway import call_text, connect, eventually, fixtures, metric, running_gateway, start_fixture
from tests.support.redis import redis_server

SESSION_LOST = -32002
REQUESTS = "toolfleet_gateway_requests_total"
OUTCOMES = ("ok", "error")
NAME = "python.fleet.test"


class Answers:
    """A resolver for unit tests: answers what the test last set, or raises what it was told to."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = list(addresses)
        self.error: OSError | None = None
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, name: str, port: int) -> list[str]:
        self.asked.append((name, port))
        if self.error is not None:
            raise self.error
        return list(self.addresses)


def _gateway(answers: Answers, port: int) -> Gateway:
    cfg = parse_config(
        f"namespaces: {{python: {{discover: {{dns: {NAME}, port: {port}, path: /mcp, interval_s: 1}}}}}}\n"
        "health: {timeout_s: 1}"
    )
    return build_gateway(cfg, store=MemoryStore(), resolver=answers)


async def test_each_address_is_a_replica_and_a_vanished_one_loses_its_sessions() -> None:
    port = free_port()  # nothing listens there: probes of the loopback addresses below are refused at once
    answers = Answers("127.0.0.2", "::1")
    gw = _gateway(answers, port)
    try:
        ns = gw.namespaces["python"]
        assert ns.replicas == {}  # nothing is known before the name is resolved
        await refresh(gw, ns)
        a, c = f"http://127.0.0.2:{port}/mcp", f"http://[::1]:{port}/mcp"
        assert answers.asked == [(NAME, port)] and set(ns.replicas) == {a, c}
        assert not any(r.available for r in ns.replicas.values())  # a new address waits for a probe to answer
        await gw.store.claim_pin("python", SessionKey("header", "conv_1"), a)
        answers.addresses = ["::1", "127.0.0.3"]
        await refresh(gw, ns)
        assert set(ns.replicas) == {c, f"http://127.0.0.3:{port}/mcp"}
        assert (await gw.store.get_pin("python", SessionKey("header", "conv_1"))).lost  # type: ignore[union-attr]
        with pytest.raises(SessionLost) as lost:
            await gw.router.resolve(ns, None, "conv_1", {"method": "tools/call", "params": {"name": "x"}})
        assert "conv_1" in str(lost.value) and a not in str(lost.value)  # the URL is for operators only
    finally:
        gw.client.close()


async def test_a_failed_lookup_keeps_the_replicas_and_a_name_that_does_not_exist_drops_them() -> None:
    port = free_port()
    answers = Answers("127.0.0.2")
    gw = _gateway(answers, port)
    try:
        ns = gw.namespaces["python"]
        await refresh(gw, ns)
        answers.error = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        await refresh(gw, ns)
        assert set(ns.replicas) == {f"http://127.0.0.2:{port}/mcp"}  # a resolver hiccup drops nothing
        answers.error = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        await refresh(gw, ns)
        assert ns.replicas == {}  # e.g. the compose service scaled to 0
    finally:
        gw.client.close()


def test_a_discovered_namespace_builds_replica_urls_from_addresses() -> None:
    cfg = parse_config("namespaces: {python: {discover: {dns: tasks.python, port: 8802}}}")
    discover = cfg.namespaces["python"].discover
    assert discover is not None and (discover.path, discover.interval_s) == ("/mcp", 5.0)
    assert discover.url("10.0.0.7") == "http://10.0.0.7:8802/mcp"
    assert discover.url("fd00::7") == "http://[fd00::7]:8802/mcp"


async def test_a_call_that_finds_no_replica_resolves_the_name_again_and_is_served() -> None:
    """A swarm starts the gateway before its tools: the name has no address yet, then it has one."""
    with fixtures("late") as (late,):
        answers = Answers()
        gw = _gateway(answers, late.port)
        try:
            ns = gw.namespaces["python"]
            await refresh(gw, ns)
            assert ns.replicas == {}
            answers.addresses = ["127.0.0.1"]  # the tool server's task started; the next lookup names it
            replica = await gw.router.pick(ns)  # no periodic lookup ran in between
            assert replica.url == late.url and replica.available
        finally:
            gw.client.close()


async def test_a_reload_that_keeps_the_name_keeps_the_replicas_found_and_their_health() -> None:
    answers = Answers("127.0.0.2")
    gw = _gateway(answers, free_port())
    try:
        await refresh(gw, gw.namespaces["python"])
        before = gw.namespaces["python"].replicas
        changed = gw.cfg.namespaces["python"].model_copy(update={"timeout_s": 30.0})
        gw.apply(gw.cfg.model_copy(update={"namespaces": {"python": changed}}))
        after = gw.namespaces["python"]
        assert after.cfg.timeout_s == 30.0 and after.replicas == before  # the same Replica objects
    finally:
        gw.client.close()


def _mount_namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-m", "sh", "-c", "mount --bind /etc/hosts /etc/hosts"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def _write_hosts(path: Path, addresses: list[str]) -> None:
    """Rewrite in place: the gateway's /etc/hosts is this file's inode, bind-mounted."""
    lines = ["127.0.0.1 localhost", *(f"{a} {NAME}" for a in addresses)]
    path.write_text("\n".join(lines) + "\n")


def _replicas(base: str) -> dict[str, str]:
    return httpx.get(f"{base}/admin/status", trust_env=False).json()["namespaces"]["python"]["replicas"]


async def _count(url: str, sid: str) -> str:
    async with connect(url, "streamable-http", headers={"x-session-id": sid}) as client:
        return await call_text(client, "count")


@pytest.mark.skipif(not _mount_namespaces(), reason="needs unshare -m (root) to give the gateway its own /etc/hosts")
@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_replicas_found_by_a_real_name_lookup_come_and_go_and_sessions_stay_on_their_address(
    store: str, tmp_path: Path
) -> None:
    if store == "redis" and shutil.which("redis-server") is None:
        pytest.skip("needs redis-server (apt install redis-server)")
    hosts, resolv = tmp_path / "hosts", tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")  # never a lookup off this machine
    # the gateway's own mount namespace, where /etc/hosts (read by getaddrinfo on every lookup) is our file
    script = 'mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'
    wrap = ["unshare", "-m", "sh", "-c", script, str(hosts), str(resolv)]
    port = free_port()
    with contextlib.ExitStack() as stack:
        ups = {}
        for replica, host in (("a", "127.0.0.2"), ("b", "127.0.0.3"), ("c", "::1")):
            ups[replica] = start_fixture(replica, port=port, host=host)
            stack.callback(ups[replica].kill)
        _write_hosts(hosts, [ups["a"].host, ups["b"].host])
        redis_url = stack.enter_context(redis_server()) if store == "redis" else "memory"
        cfg = {
            "namespaces": {"python": {"discover": {"dns": NAME, "port": port, "interval_s": 0.3}}},
            "health": {"interval_s": 0.5, "timeout_s": 2, "failures_to_open": 2, "open_s": 0.5},
            "store": redis_url,
        }
        gw = stack.enter_context(running_gateway(cfg, wrap=wrap))
        url = gw.url("python")
        up = {ups["a"].url: "up", ups["b"].url: "up"}
        await eventually(lambda: _replicas(gw.base) == up, what="both addresses of the name in service")
        sessions = {}
        for _ in range(2):  # new sessions go to the replica with the fewest: one each
            sid = f"conv_{uuid.uuid4().hex[:10]}"
            sessions[(await _count(url, sid)).split(":")[0]] = sid
        assert set(sessions) == {"a", "b"}

        _write_hosts(hosts, [ups["b"].host, ups["c"].host])  # a being stopped, c scaled up (an AAAA answer)
        up = {ups["a"].url: "draining", ups["b"].url: "up", ups["c"].url: "up"}
        await eventually(lambda: _replicas(gw.base) == up, what="the new answer adopted, a draining")
        # a left the name but still answers (a swarm takes a task out of DNS as it stops it): it serves the
        # session it holds, and takes no new one.
        assert await _count(url, sessions["a"]) == f"a:{sessions['a']}:2"
        assert await _count(url, sessions["b"]) == f"b:{sessions['b']}:2"  # b's session stays where it began
        assert (await _count(url, f"conv_{uuid.uuid4().hex[:10]}")).startswith("c:")  # the emptiest replica
        ups["a"].kill()  # killed, not drained (it never said it drains): its session is lost, loudly
        up = {ups["b"].url: "up", ups["c"].url: "up"}
        await eventually(lambda: _replicas(gw.base) == up, what="a dropped once it is down")
        async with connect(url, "streamable-http", headers={"x-session-id": sessions["a"]}) as client:
            with pytest.raises(MCPError) as lost:
                await call_text(client, "count")
        assert lost.value.error.code == SESSION_LOST
        assert sessions["a"] in lost.value.error.message and ups["a"].url not in lost.value.error.message
        assert metric(gw.base, "toolfleet_gateway_upstream_healthy", namespace="python", replica=ups["a"].url) == 0
        assert '"discovery.changed"' in gw.logs()


class RefusingOnce(MemoryStore):
    """A store whose first blob write fails, as a Redis timeout would."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0
        self.saved = anyio.Event()

    async def put_blob(self, name: str, value: object) -> None:
        if not self.refused:
            self.refused += 1
            raise TimeoutError("store timed out")
        await super().put_blob(name, value)
        self.saved.set()


async def test_a_store_failure_during_a_probe_does_not_stop_probing_and_the_discovery_is_saved_later() -> None:
    with fixtures("a") as (up,):
        cfg = parse_config(
            f"namespaces: {{python: {{replicas: [{up.url}]}}}}\nhealth: {{interval_s: 0.2, open_s: 0.2, timeout_s: 2}}"
        )
        store = RefusingOnce()
        gw = build_gateway(cfg, store=store)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(probe_forever, gw)
                with anyio.fail_after(15):
                    await store.saved.wait()
                tg.cancel_scope.cancel()
        finally:
            gw.client.close()
    assert store.refused == 1  # the first save failed, the loop lived on and a later probe saved it
    assert (await store.get_blob("discovery:python"))["tools"]
    assert gw.namespaces["python"].replicas[up.url].available


class CountingBlobs(MemoryStore):
    """A store that counts blob writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    async def put_blob(self, name: str, value: object) -> None:
        self.writes.append(name)
        await super().put_blob(name, value)


async def test_a_gateway_that_starts_on_saved_discovery_does_not_write_it_again_unchanged() -> None:
    with fixtures("a") as (up,):
        cfg = parse_config(f"namespaces: {{python: {{replicas: [{up.url}]}}}}\nhealth: {{timeout_s: 5}}")
        store = CountingBlobs()
        for _ in range(2):  # the first gateway saves what it found; its successor finds the same
            gw = build_gateway(cfg, store=store)
            try:
                await gw.load_discovery()
                await probe_all(gw)
            finally:
                gw.client.close()
    assert store.writes.count("discovery:python") == 1


class RefusingBlobs(MemoryStore):
    """A store that keeps pins but refuses every blob write, as a Redis that times out on large values."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    async def put_blob(self, name: str, value: object) -> None:
        self.refused += 1
        raise TimeoutError("store timed out")


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_discovery_answers_reach_the_client_when_the_store_refuses_to_save_them(transport: str) -> None:
    """Saving discovery is for later outages: its failure must not fail the answer it was taken from."""
    with fixtures("a") as (up,):
        cfg = parse_config(f"namespaces: {{python: {{replicas: [{up.url}]}}}}\nhealth: {{interval_s: 300}}")
        store = RefusingBlobs()
        with serve_asgi(build_app(build_gateway(cfg, store=store))) as base:
            path = "sse" if transport == "sse" else "mcp"
            for _ in range(2):  # and the gateway keeps serving
                async with connect(f"{base}/python/{path}", transport) as client:
                    assert "echo" in {t.name for t in (await client.list_tools()).tools}
                    assert await call_text(client, "add", {"a": 2, "b": 3}) == "5"
            if transport == "streamable-http":  # (only streamable messages are in the request metrics)
                listed = {
                    o: metric(base, REQUESTS, namespace="python", method="tools/list", outcome=o) for o in OUTCOMES
                }
                assert listed == {"ok": 2, "error": 0}
    assert store.refused >= 2  # it was asked to save (the probe at start and the requests) and refused
