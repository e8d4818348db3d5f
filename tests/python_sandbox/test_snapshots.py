"""Sessions saved to a dir snapshot store survive eviction, idle reaping, a SIGTERM restart and, from their
background snapshot, a SIGKILL (both backends).

What cannot be pickled (a socket, a thread) is named in the restore notice; a planted unsigned snapshot is
refused with the reset notice and a fresh session; cleanup_session deletes the session's snapshot. Each path
moves the server's snapshot metrics (taken and restored by trigger, bytes, seconds, failures by reason).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.python_sandbox.conftest import containers_of, require_backend, server_args
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service, wait_until
from toolkit.snapshots import Snapshot, SnapshotId
from toolkit.snapshots.base import seal
from toolkit.wire import ANONYMOUS, fleet_secret

SETUP = (
    "import json, socket, threading\n"
    "x = {'a': [1, 2]}\n"
    "def f(n):\n    return n * x['a'][1]\n"
    "open('/mnt/data/note.txt', 'w').write('kept')\n"
    "'set'"
)
"""Variables, a function using them, an imported module and a file in /mnt/data."""
CHECK = "print(x, f(3), open('/mnt/data/note.txt').read(), json.dumps([1]))"
CHECKED = "{'a': [1, 2]} 6 kept [1]"


def snapshot_args(backend: str, store: Path, *extra: str) -> list[str]:
    instance = f"pytest-snap-{uuid.uuid4().hex[:8]}"
    snapshots = ["--snapshots", "dir", "--snapshot-dir", str(store)]
    return server_args(backend, instance, *snapshots, "--drain-s", "0", *extra)


def assert_nothing_left(backend: str, args: list[str]) -> None:
    """A stopped docker server left none of its containers (saving sessions must not keep any)."""
    if backend == "docker":
        assert containers_of(args[args.index("--instance") + 1]) == []


async def call(server: Service, session: str, code: str) -> str:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session}) as mcp:
        return str((await mcp.call_tool("python", {"code": code})).content[0].text)  # type: ignore[union-attr]


def snapshot_file(store: Path, session: str) -> Path:
    sid = SnapshotId("python", ANONYMOUS, session)
    return store / sid.owner_tag / f"{sid.name}.snap"


def sessions_held(server: Service) -> int:
    return int(httpx.get(f"{server.url}/healthz").json()["sessions"])


def metric(server: Service, sample: str, **labels: str) -> float:
    """One sample of the server's /metrics (0 when it has none yet)."""
    for family in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text):
        for found in family.samples:
            if found.name == sample and labels.items() <= found.labels.items():
                return float(found.value)
    return 0.0


def snapshots(server: Service, op: str, trigger: str) -> float:
    return metric(server, "toolfleet_tool_snapshots_total", op=op, trigger=trigger)


def failures(server: Service, op: str, reason: str) -> float:
    return metric(server, "toolfleet_tool_snapshot_failures_total", op=op, reason=reason)


@pytest.fixture(scope="module", params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return str(request.param)


@pytest.fixture(scope="module")
def store(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store per backend's server: a stopping server saves its sessions, which a store shared by the next
    server would restore (as it should, on the same store)."""
    return tmp_path_factory.mktemp(f"snapshots-{backend}")


@pytest.fixture(scope="module")
def server(backend: str, store: Path) -> Iterator[Service]:
    """Two sessions per owner: a third evicts the least recently used (all these callers are one owner). No
    background snapshots: each test here sees only what eviction saves."""
    limits = ["--max-sessions-per-owner", "2", "--snapshot-max-mib", "1", "--snapshot-every-s", "0"]
    args = snapshot_args(backend, store, *limits)
    with running_service(args) as svc:
        yield svc
    assert_nothing_left(backend, args)


async def evict(server: Service) -> None:
    """Two other sessions of the same owner take the places of the one used longest ago."""
    for other in ("filler-1", "filler-2"):
        assert (await call(server, other, "1 + 1")).endswith("2")


async def test_variables_and_files_survive_eviction_and_unpicklables_are_named(server: Service, store: Path) -> None:
    unpicklable = "\ns = socket.socket()\nt = threading.Thread(target=print)"
    assert await call(server, "evicted", SETUP + unpicklable + "\n'set'") == "'set'"
    saved, restored = snapshots(server, "save", "evict"), snapshots(server, "restore", "evict")
    sized = metric(server, "toolfleet_tool_snapshot_bytes_count", op="restore")
    await evict(server)
    assert snapshot_file(store, "evicted").exists()
    assert snapshots(server, "save", "evict") == saved + 1
    text = await call(server, "evicted", CHECK)
    assert snapshots(server, "restore", "evict") == restored + 1
    assert metric(server, "toolfleet_tool_snapshot_bytes_count", op="restore") == sized + 1
    assert text.startswith("[restored from a snapshot of ")
    assert "UTC; not restored: s, t, running processes, open files]\n" in text
    assert text.endswith(CHECKED)
    assert await call(server, "evicted", "'again'") == "'again'"  # told once


async def test_a_planted_unsigned_snapshot_gives_a_fresh_session_and_says_why(server: Service, store: Path) -> None:
    path = snapshot_file(store, "planted")
    path.parent.mkdir(parents=True, exist_ok=True)
    sid = SnapshotId("python", ANONYMOUS, "planted")
    path.write_bytes(seal(Snapshot(sid, b"not a pickle"), b"someone else's secret"))
    refused = failures(server, "restore", "unsigned")
    text = await call(server, "planted", "'fresh' if 'x' not in globals() else 'restored'")
    assert failures(server, "restore", "unsigned") == refused + 1
    assert text == (
        "[this session's state was lost; its snapshot was refused (the snapshot is not signed by this fleet): "
        "everything earlier calls made in it is gone]\n'fresh'"
    )
    assert not path.exists()


async def test_a_signed_snapshot_the_sandbox_cannot_load_gives_a_fresh_session(server: Service, store: Path) -> None:
    """The server seals and moves bytes only: a payload that is no pickle fails inside the sandbox, not in it."""
    path = snapshot_file(store, "garbled")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(seal(Snapshot(SnapshotId("python", ANONYMOUS, "garbled"), b"not a pickle"), fleet_secret()))
    failed = failures(server, "restore", "sandbox")
    text = await call(server, "garbled", "'fresh' if 'x' not in globals() else 'restored'")
    assert failures(server, "restore", "sandbox") == failed + 1
    assert text == (
        "[this session's state was lost; its snapshot was refused (the sandbox could not load it "
        "(SnapshotFailed)): everything earlier calls made in it is gone]\n'fresh'"
    )


async def test_a_state_over_the_cap_is_not_saved_and_its_next_call_says_why(server: Service, store: Path) -> None:
    await call(server, "big", "big = bytes(2 * 2**20)")
    oversized = failures(server, "save", "oversized")
    await evict(server)
    assert not snapshot_file(store, "big").exists()
    assert failures(server, "save", "oversized") == oversized + 1
    assert await call(server, "big", "'fresh' if 'big' not in globals() else 'restored'") == (
        "[this session's state was evicted (this owner's session limit of 2 on this server); it could not be saved "
        "(the session's state is larger than the snapshot cap (1 MiB)): everything earlier calls made in it is "
        "gone]\n'fresh'"
    )


async def test_cleanup_session_deletes_the_snapshot(server: Service, store: Path) -> None:
    await call(server, "cleaned", "y = 1")
    await evict(server)
    assert snapshot_file(store, "cleaned").exists()
    async with mcp_session(server.url, "streamable-http", {"x-session-id": "cleaned"}) as mcp:
        await mcp.call_tool("cleanup_session", {})
    assert not snapshot_file(store, "cleaned").exists()


async def test_variables_and_files_survive_idle_reaping_and_expired_ones_are_swept(
    backend: str, tmp_path: Path
) -> None:
    stale = snapshot_file(tmp_path, "stale")
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an expired snapshot")
    os.utime(stale, (time.time() - 8 * 24 * 3600,) * 2)  # older than the 7-day TTL
    args = snapshot_args(backend, tmp_path, "--session-ttl-s", "1", "--reap-interval-s", "0.2")
    with running_service(args) as server:
        assert wait_until(lambda: not stale.exists(), 10)  # the sweeper's first round, as the server starts
        assert await call(server, "idle", SETUP) == "'set'"
        assert wait_until(lambda: sessions_held(server) == 0, 10)
        text = await call(server, "idle", CHECK)
    assert_nothing_left(backend, args)
    assert text.startswith("[restored from a snapshot of ") and text.endswith(CHECKED)
    assert "not restored: running processes, open files]" in text


async def test_variables_and_files_survive_a_sigterm_restart(backend: str, tmp_path: Path) -> None:
    args = snapshot_args(backend, tmp_path)
    with running_service(args) as server:
        assert await call(server, "drained", SETUP) == "'set'"
        server.stop(signal.SIGTERM)  # drains: the session is saved before its sandbox goes
    with running_service(args) as server:
        text = await call(server, "drained", CHECK)
    assert_nothing_left(backend, args)
    assert text.startswith("[restored from a snapshot of ") and text.endswith(CHECKED)


@pytest.fixture(scope="module")
def saving(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A server saving sessions in the background 0.2 s after a call, under a 1 MiB cap."""
    store = tmp_path_factory.mktemp(f"snapshots-{backend}-background")
    args = snapshot_args(backend, store, "--snapshot-every-s", "0.2", "--snapshot-max-mib", "1")
    with running_service(args) as svc:
        yield svc
    assert_nothing_left(backend, args)


async def test_a_background_save_over_the_cap_is_told_once_and_the_session_runs_on(saving: Service) -> None:
    oversized = failures(saving, "save", "oversized")
    assert await call(saving, "growing", "big = bytes(2 * 2**20)\n'grown'") == "'grown'"
    assert wait_until(lambda: failures(saving, "save", "oversized") == oversized + 1, 20)
    assert await call(saving, "growing", "len(big)") == (
        "[this session's state could not be saved (the session's state is larger than the snapshot cap (1 MiB)): "
        "it keeps running here, but what changed since its last snapshot is lost if this server stops or fails]\n"
        "2097152"
    )
    assert wait_until(lambda: failures(saving, "save", "oversized") == oversized + 2, 20)  # failed again...
    assert await call(saving, "growing", "del big\n'smaller'") == "'smaller'"  # ...but told once
    saved = snapshots(saving, "save", "background")
    assert wait_until(lambda: snapshots(saving, "save", "background") == saved + 1, 20)


async def test_variables_and_files_survive_a_sigkill_from_the_background_snapshot(backend: str, tmp_path: Path) -> None:
    """The default --snapshot-every-s saves the session a moment after its call; a SIGKILL gives the server no
    chance to save it, and a new server on the same store restores what the background snapshot kept."""
    args = snapshot_args(backend, tmp_path)
    with running_service(args) as server:
        assert await call(server, "killed", SETUP) == "'set'"
        assert wait_until(lambda: snapshots(server, "save", "background") == 1, 30)
        seconds = metric(server, "toolfleet_tool_snapshot_seconds_count", op="save")
        assert seconds == 1 and metric(server, "toolfleet_tool_snapshot_bytes_sum", op="save") > 0
        server.stop(signal.SIGKILL)
    with running_service(args) as server:
        text = await call(server, "killed", CHECK)
        assert snapshots(server, "restore", "background") == 1
    assert_nothing_left(backend, args)
    assert text.startswith("[restored from a snapshot of ") and text.endswith(CHECKED)
