"""Sessions saved to a dir snapshot store survive eviction, idle reaping and a SIGTERM restart (local backend).

What cannot be pickled (a socket, a thread) is named in the restore notice; a planted unsigned snapshot is
refused with the reset notice and a fresh session; cleanup_session deletes the session's snapshot.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.python_sandbox.conftest import require_backend, server_args
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service, wait_until
from toolkit.snapshots import Snapshot, SnapshotId
from toolkit.snapshots.base import seal
from toolkit.wire import ANONYMOUS

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


def snapshot_args(store: Path, *extra: str) -> list[str]:
    instance = f"pytest-snap-{uuid.uuid4().hex[:8]}"
    snapshots = ["--snapshots", "dir", "--snapshot-dir", str(store)]
    return server_args("local", instance, *snapshots, "--drain-s", "0", *extra)


async def call(server: Service, session: str, code: str) -> str:
    async with mcp_session(server.url, "streamable-http", {"x-session-id": session}) as mcp:
        return str((await mcp.call_tool("python", {"code": code})).content[0].text)  # type: ignore[union-attr]


def snapshot_file(store: Path, session: str) -> Path:
    sid = SnapshotId("python", ANONYMOUS, session)
    return store / sid.owner_tag / f"{sid.name}.snap"


def sessions_held(server: Service) -> int:
    return int(httpx.get(f"{server.url}/healthz").json()["sessions"])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_backend("local")
    return tmp_path_factory.mktemp("snapshots")


@pytest.fixture(scope="module")
def server(store: Path) -> Iterator[Service]:
    """Two sessions per owner: a third evicts the least recently used (all these callers are one owner)."""
    with running_service(snapshot_args(store, "--max-sessions-per-owner", "2")) as svc:
        yield svc


async def evict(server: Service) -> None:
    """Two other sessions of the same owner take the places of the one used longest ago."""
    for other in ("filler-1", "filler-2"):
        assert (await call(server, other, "1 + 1")).endswith("2")


async def test_variables_and_files_survive_eviction_and_unpicklables_are_named(server: Service, store: Path) -> None:
    unpicklable = "\ns = socket.socket()\nt = threading.Thread(target=print)"
    assert await call(server, "evicted", SETUP + unpicklable + "\n'set'") == "'set'"
    await evict(server)
    assert snapshot_file(store, "evicted").exists()
    text = await call(server, "evicted", CHECK)
    assert text.startswith("[restored from a snapshot of ")
    assert "UTC; not restored: s, t, running processes, open files]\n" in text
    assert text.endswith(CHECKED)
    assert await call(server, "evicted", "'again'") == "'again'"  # told once


async def test_a_planted_unsigned_snapshot_gives_a_fresh_session_and_says_why(server: Service, store: Path) -> None:
    path = snapshot_file(store, "planted")
    path.parent.mkdir(parents=True, exist_ok=True)
    sid = SnapshotId("python", ANONYMOUS, "planted")
    path.write_bytes(seal(Snapshot(sid, b"not a pickle"), b"someone else's secret"))
    text = await call(server, "planted", "'fresh' if 'x' not in globals() else 'restored'")
    assert text == (
        "[this session's state was lost; its snapshot was refused (the snapshot is not signed by this fleet): "
        "everything earlier calls made in it is gone]\n'fresh'"
    )
    assert not path.exists()


async def test_cleanup_session_deletes_the_snapshot(server: Service, store: Path) -> None:
    await call(server, "cleaned", "y = 1")
    await evict(server)
    assert snapshot_file(store, "cleaned").exists()
    async with mcp_session(server.url, "streamable-http", {"x-session-id": "cleaned"}) as mcp:
        await mcp.call_tool("cleanup_session", {})
    assert not snapshot_file(store, "cleaned").exists()


async def test_variables_and_files_survive_idle_reaping(tmp_path: Path) -> None:
    require_backend("local")
    with running_service(snapshot_args(tmp_path, "--session-ttl-s", "1", "--reap-interval-s", "0.2")) as server:
        assert await call(server, "idle", SETUP) == "'set'"
        assert wait_until(lambda: sessions_held(server) == 0, 10)
        text = await call(server, "idle", CHECK)
    assert text.startswith("[restored from a snapshot of ") and text.endswith(CHECKED)
    assert "not restored: running processes, open files]" in text


async def test_variables_and_files_survive_a_sigterm_restart(tmp_path: Path) -> None:
    require_backend("local")
    args = snapshot_args(tmp_path)
    with running_service(args) as server:
        assert await call(server, "drained", SETUP) == "'set'"
        server.stop(signal.SIGTERM)  # drains: the session is saved before its sandbox goes
    with running_service(args) as server:
        text = await call(server, "drained", CHECK)
    assert text.startswith("[restored from a snapshot of ") and text.endswith(CHECKED)
