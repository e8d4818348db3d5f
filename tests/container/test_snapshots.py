"""Container sessions saved to a dir snapshot store survive eviction, idle reaping, a SIGTERM restart and a SIGKILL.

What comes back: files in /mnt/data and in the work dir, and a named shell's cwd and exported variables; what
cannot (a symlink, unexported variables, running processes) is named in the restore notice. A planted snapshot
(corrupt, unsigned, another session's, one whose tar climbs out with `..`) is refused with the reset notice and
the session starts fresh. One docker server (runc) for the module, plus pairs for the reap, the restart and the kill.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.container.conftest import containers_of, require_docker, server_args
from tests.support.gateway import connect
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service, wait_until
from toolkit.snapshots import Snapshot, SnapshotId
from toolkit.snapshots.base import seal
from toolkit.wire import ANONYMOUS, fleet_secret
from tools.container.agent import tar_of

SETUP: list[tuple[str | None, str]] = [
    (None, "mkdir -p /workspace/proj && echo work > /workspace/proj/main.txt && ln -s main.txt /workspace/proj/link"),
    (None, "echo data > /mnt/data/note.txt"),
    (None, "echo private > /workspace/secret && chmod 000 /workspace/secret"),
    ("dev", "cd /workspace/proj && export GREETING=hi && LOCAL=unexported"),
    ("scratch", "mkdir -p /tmp/s && cd /tmp/s"),
]
"""(session_name, script): files in the work dir and /mnt/data, a symlink, a file even its owner may not read (no
capabilities in the sandbox), a named shell's state, and a named shell standing in /tmp (not saved)."""
CHECK = ("dev", 'echo "$(pwd) ${GREETING:-unset} ${LOCAL:-unset}"; cat main.txt /mnt/data/note.txt')
CHECKED = "/workspace/proj hi unset\nwork\ndata\n[exit code 0]"
NOT_RESTORED = (
    "not restored: /workspace/secret, /workspace/proj/link, files under /tmp, shell variables that were not "
    "exported, the directory of shell 'scratch', running processes, open files]\n"
)
FRESH = (None, "find /mnt/data /workspace -mindepth 1 | wc -l")
FRESH_TEXT = "0\n[exit code 0]"


async def run(server: Service, session: str, step: tuple[str | None, str], transport: str = "streamable-http") -> str:
    return (await run_all(server, session, [step], transport))[0]


async def run_all(
    server: Service, session: str, steps: list[tuple[str | None, str]], transport: str = "streamable-http"
) -> list[str]:
    """`bash -c` scripts, each in its named shell `step[0]` (None: the unnamed one), over one connection."""
    texts = []
    async with mcp_session(server.url, transport, {"x-session-id": session}) as mcp:
        for name, script in steps:
            args: dict[str, Any] = {"cmd": ["bash", "-c", script]}
            if name is not None:
                args["session_name"] = name
            texts.append(str((await mcp.call_tool("exec", args)).content[0].text))  # type: ignore[union-attr]
    return texts


async def set_up(server: Service, session: str) -> None:
    """One connection for all the steps: their gaps stay far below the reap test's idle time."""
    assert await run_all(server, session, SETUP) == ["[exit code 0]"] * len(SETUP)


def snapshot_file(store: Path, session: str) -> Path:
    sid = SnapshotId("container", ANONYMOUS, session)
    return store / sid.owner_tag / f"{sid.name}.snap"


def plant(store: Path, session: str, blob: bytes) -> Path:
    path = snapshot_file(store, session)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(blob)
    return path


def snapshot_args(instance: str, store: Path, *extra: str) -> list[str]:
    return server_args(instance, "--snapshots", "dir", "--snapshot-dir", str(store), "--drain-s", "0", *extra)


def sessions_held(server: Service) -> int:
    return int(httpx.get(f"{server.url}/healthz").json()["sessions"])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("container-snapshots")


@pytest.fixture(scope="module")
def server(store: Path) -> Iterator[Service]:
    """Two sessions per owner: a third evicts the least recently used (all these callers are one owner)."""
    require_docker()
    instance = f"pytest-ctr-snap-{uuid.uuid4().hex[:8]}"
    with running_service(snapshot_args(instance, store, "--max-sessions-per-owner", "2")) as svc:
        yield svc
    assert containers_of(instance) == [], "the server left containers behind"


async def evict(server: Service) -> None:
    """Two other sessions of the same owner take the places of the one used longest ago."""
    for other in ("filler-1", "filler-2"):
        assert (await run(server, other, (None, "true"))).endswith("[exit code 0]")


async def test_files_and_a_named_shell_survive_eviction_and_the_rest_is_named(server: Service, store: Path) -> None:
    await set_up(server, "evicted")
    await evict(server)
    assert snapshot_file(store, "evicted").exists()
    text = await run(server, "evicted", CHECK, transport="sse")
    assert text.startswith("[restored from a snapshot of ") and NOT_RESTORED in text
    assert text.endswith(CHECKED)
    assert await run(server, "evicted", CHECK) == CHECKED  # told once


async def test_a_session_named_by_its_mcp_session_id_survives_eviction(server: Service) -> None:
    async with mcp_session(server.url, "streamable-http") as mcp:
        await mcp.call_tool("exec", {"cmd": ["bash", "-c", "echo kept > /mnt/data/mine.txt"]})
        await evict(server)
        result = await mcp.call_tool("exec", {"cmd": ["cat", "/mnt/data/mine.txt"]})
    text = str(result.content[0].text)  # type: ignore[union-attr]
    assert text.startswith("[restored from a snapshot of ") and text.endswith("kept\n[exit code 0]")


def _signed(session: str, payload: bytes, *, owner: str = ANONYMOUS, key: str | None = None) -> bytes:
    return seal(Snapshot(SnapshotId("container", owner, key or session), payload), fleet_secret())


PLANTED = {
    "corrupt": (lambda s: b"garbage", "the snapshot is not in toolfleet's format"),
    "truncated": (lambda s: _signed(s, bytes(100))[:-10], "the snapshot is incomplete or damaged"),
    "unsigned": (
        lambda s: seal(Snapshot(SnapshotId("container", ANONYMOUS, s), b"x"), b"another secret"),
        "the snapshot is not signed by this fleet",
    ),
    "foreign": (lambda s: _signed(s, b"x", owner="someone-else"), "the snapshot belongs to another session"),
    "not-a-tar": (lambda s: _signed(s, b"not a tar"), "the sandbox could not load it (SnapshotFailed)"),
    "climbing": (
        lambda s: _signed(
            s, tar_of({"shells.json": b"{}", "data.tar": tar_of({"../escape": b"x"}), "work.tar": tar_of({})})
        ),
        "the sandbox could not load it (SnapshotFailed)",
    ),
}


@pytest.mark.parametrize("kind", PLANTED)
async def test_a_bad_snapshot_is_refused_with_a_fresh_session_and_the_reason(
    server: Service, store: Path, kind: str
) -> None:
    session = f"planted-{kind}"
    make, why = PLANTED[kind]
    path = plant(store, session, make(session))
    text = await run(server, session, FRESH)
    assert text == (
        f"[this session's state was lost; its snapshot was refused ({why}): everything earlier calls made in it is "
        f"gone]\n{FRESH_TEXT}"
    )
    if "sandbox" not in why:  # the store deletes what it refuses; what the sandbox refused waits to be replaced
        assert not path.exists()


async def test_cleanup_session_deletes_the_snapshot(server: Service, store: Path) -> None:
    await run(server, "cleaned", (None, "touch /mnt/data/x"))
    await evict(server)
    assert snapshot_file(store, "cleaned").exists()
    async with mcp_session(server.url, "streamable-http", {"x-session-id": "cleaned"}) as mcp:
        await mcp.call_tool("cleanup_session", {})
    assert not snapshot_file(store, "cleaned").exists()


async def test_files_and_a_named_shell_survive_idle_reaping_and_a_sigterm_restart(tmp_path: Path) -> None:
    require_docker()
    instance = f"pytest-ctr-snap2-{uuid.uuid4().hex[:8]}"
    args = snapshot_args(instance, tmp_path, "--session-ttl-s", "2", "--reap-interval-s", "0.2")
    with running_service(args) as server:
        await set_up(server, "idle")
        assert wait_until(lambda: sessions_held(server) == 0, 10)
        reaped = await run(server, "idle", CHECK)
        await set_up(server, "drained")
        server.stop(signal.SIGTERM)  # drains: the session is saved before its container goes
    with running_service(args) as server:
        restarted = await run(server, "drained", CHECK)
    assert containers_of(instance) == []
    for text in (reaped, restarted):
        assert text.startswith("[restored from a snapshot of ") and NOT_RESTORED in text
        assert text.endswith(CHECKED)


async def test_files_and_a_named_shell_survive_a_sigkill_from_the_background_snapshot(tmp_path: Path) -> None:
    """A SIGKILLed server saves nothing as it dies: the next server on the store restores the background save made
    a moment after the session's last call (the dead server's containers go when its successor starts)."""
    require_docker()
    instance = f"pytest-ctr-snap3-{uuid.uuid4().hex[:8]}"
    args = snapshot_args(instance, tmp_path, "--snapshot-every-s", "0.3")
    saved = snapshot_file(tmp_path, "killed")
    with running_service(args) as server:
        await set_up(server, "killed")
        done = time.time()
        assert wait_until(lambda: saved.exists() and saved.stat().st_mtime >= done, 20)  # saved after the last call
        server.stop(signal.SIGKILL)
    with running_service(args) as server:
        text = await run(server, "killed", CHECK)
    assert containers_of(instance) == []
    assert text.startswith("[restored from a snapshot of ") and NOT_RESTORED in text
    assert text.endswith(CHECKED)


async def test_a_2026_era_handle_session_survives_eviction(server: Service) -> None:
    """A client of the sessionless era (mcp 2.x's default) keeps its state by a handle: evicted, it is restored."""
    async with connect(f"{server.url}/mcp", "streamable-http") as client:
        write = ["bash", "-c", "echo h > /mnt/data/h.txt"]
        made = await client.call_tool("exec", {"cmd": write, "session_handle": "new"})
        handle = str(made.structured_content["session_handle"])  # type: ignore[index]
        await evict(server)
        again = await client.call_tool("exec", {"cmd": ["cat", "/mnt/data/h.txt"], "session_handle": handle})
    text = str(again.content[0].text)  # type: ignore[union-attr]
    assert text.startswith("[restored from a snapshot of ") and text.endswith("h\n[exit code 0]"), text
