"""The snapshot store (issue 35's foundation): sealed, per session and owner, bounded, expiring - on a real
directory and a real redis-server. Whatever bytes a store hands back, a snapshot comes out only for the session it
was taken of, whole and signed by this fleet; anything else is refused with its reason and deleted."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.redis import redis_server
from toolkit.snapshots import Limits, Snapshot, SnapshotId, SnapshotRefused, SnapshotStore, open_snapshots
from toolkit.snapshots.base import seal, unseal
from toolkit.snapshots.directory import DirSnapshots
from toolkit.snapshots.redis import RedisSnapshots

SECRET = b"test-fleet-secret"
ALICE = SnapshotId("python", "key-alice", "conv_1")


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["dir", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SnapshotStore]:
    limits = Limits(per_session_bytes=4096, per_owner_bytes=3 * 2048, ttl_s=60)
    if request.param == "dir":
        yield DirSnapshots(str(tmp_path / "snaps"), limits, SECRET)
    else:
        made = RedisSnapshots(request.getfixturevalue("redis_url"), limits, SECRET)
        yield made
        await made._redis.flushdb()
        await made._redis.aclose()


async def test_a_snapshot_comes_back_for_its_session_only(store: SnapshotStore) -> None:
    await store.save(Snapshot(ALICE, b"state", unsaved=("sock",)))
    back = await store.load(ALICE)
    assert back is not None and (back.payload, back.unsaved) == (b"state", ("sock",))
    assert await store.load(SnapshotId("python", "key-bob", "conv_1")) is None  # same key, another owner
    assert await store.load(SnapshotId("container", "key-alice", "conv_1")) is None
    await store.delete(ALICE)
    assert await store.load(ALICE) is None


async def test_a_blob_planted_under_another_sessions_name_is_refused_as_foreign(store: SnapshotStore) -> None:
    bob = SnapshotId("python", "key-bob", "conv_1")
    await store._put(bob.owner_tag, bob.name, seal(Snapshot(ALICE, b"alice's"), SECRET))
    with pytest.raises(SnapshotRefused) as refused:
        await store.load(bob)
    assert refused.value.reason == "foreign" and await store._get(bob.owner_tag, bob.name) is None


async def test_a_snapshot_sealed_without_the_fleets_secret_is_refused(store: SnapshotStore) -> None:
    await store._put(ALICE.owner_tag, ALICE.name, seal(Snapshot(ALICE, b"planted"), b"another secret"))
    with pytest.raises(SnapshotRefused) as refused:
        await store.load(ALICE)
    assert refused.value.reason == "unsigned"


async def test_an_oversized_state_is_refused_and_the_last_snapshot_kept(store: SnapshotStore) -> None:
    await store.save(Snapshot(ALICE, b"small"))
    with pytest.raises(SnapshotRefused) as refused:
        await store.save(Snapshot(ALICE, b"x" * 4097))
    assert refused.value.reason == "oversized" and "MiB" in str(refused.value)
    back = await store.load(ALICE)
    assert back is not None and back.payload == b"small"


async def test_an_owner_over_budget_loses_its_own_oldest_never_anothers(store: SnapshotStore) -> None:
    bob = SnapshotId("python", "key-bob", "conv_b")
    await store.save(Snapshot(bob, b"b" * 1500))
    mine = [SnapshotId("python", "key-alice", f"conv_{i}") for i in range(5)]
    for sid in mine:
        await store.save(Snapshot(sid, b"a" * 1500))
        await anyio.sleep(0.01)  # distinct store times: "oldest" is well defined
    kept = [sid for sid in mine if await store.load(sid) is not None]
    assert kept == mine[-len(kept) :] and 1 <= len(kept) < len(mine)
    assert await store.load(bob) is not None


async def test_an_expired_snapshot_is_refused(store: SnapshotStore) -> None:
    await store._put(ALICE.owner_tag, ALICE.name, seal(Snapshot(ALICE, b"old", taken_at=time.time() - 61), SECRET))
    with pytest.raises(SnapshotRefused) as refused:
        await store.load(ALICE)
    assert refused.value.reason == "expired"


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_no_damaged_blob_unseals(data: st.DataObject) -> None:
    """Any truncation or any flipped byte of a sealed snapshot is refused: never a snapshot with other bytes."""
    blob = seal(Snapshot(ALICE, data.draw(st.binary(max_size=300)), taken_at=1e9, unsaved=("t",)), SECRET)
    if data.draw(st.booleans()):
        damaged = blob[: data.draw(st.integers(0, len(blob) - 1))]
    else:
        at = data.draw(st.integers(0, len(blob) - 1))
        damaged = blob[:at] + bytes([blob[at] ^ data.draw(st.integers(1, 255))]) + blob[at + 1 :]
    with pytest.raises(SnapshotRefused):
        unseal(damaged, ALICE, SECRET, now=1e9, ttl_s=60)


async def test_the_directory_sweep_removes_expired_snapshots_and_dead_temp_files(tmp_path: Path) -> None:
    store = DirSnapshots(str(tmp_path / "s"), Limits(ttl_s=60), SECRET)
    await store.save(Snapshot(ALICE, b"fresh"))
    old = SnapshotId("python", "key-alice", "conv_old")
    await store.save(Snapshot(old, b"old"))
    path = store._path(old.owner_tag, old.name)
    os.utime(path, (time.time() - 120, time.time() - 120))
    part = path.parent / ".part-dead"
    part.write_bytes(b"half")
    os.utime(part, (time.time() - 7200, time.time() - 7200))
    assert await store.sweep() == 2
    assert await store.load(ALICE) is not None and not part.exists()


def test_an_unknown_store_name_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="none, dir, redis"):
        open_snapshots("s3", str(tmp_path))
    assert not open_snapshots("none", "").enabled
