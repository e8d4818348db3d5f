"""Background snapshots (`toolkit.snapshots.autosave`) through the session registry, a real keeper and a real dir
store: a burst of changes is saved once, a session in a call is never read midway, an ending session is never
resurrected by its late save, and a save over the cap is told once. The states are in-process stand-ins for a
sandbox (the python tool's own are tested in tests/python_sandbox/test_snapshots.py); each step waits for the
registry's loop to have run the save, never for a fixed time."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from toolkit.sessions import SessionRegistry
from toolkit.snapshots import Limits, SnapshotId
from toolkit.snapshots.autosave import Autosave
from toolkit.snapshots.directory import DirSnapshots
from toolkit.snapshots.keeper import SnapshotKeeper
from toolkit.wire import ANONYMOUS

SECRET = b"test-fleet-secret"
EVERY_S = 0.05


@dataclass
class State:
    """A session whose snapshot is its `value`; `gate`, while set, holds each snapshot until it is opened."""

    value: bytes = b"v0"
    taken: list[bytes] = field(default_factory=list)
    started: anyio.Event = field(default_factory=anyio.Event)
    gate: anyio.Event | None = None

    async def snapshot(self) -> tuple[bytes, list[str]]:
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        self.taken.append(self.value)
        return self.value, []

    async def restore(self, payload: bytes) -> list[str]:
        self.value = payload
        return []

    async def aclose(self) -> None:
        return None


class GatedStore(DirSnapshots):
    """A dir store whose writes wait for `gate` (when set): a save caught between its sandbox and the store."""

    def __init__(self, where: str, limits: Limits) -> None:
        super().__init__(where, limits, SECRET)
        self.gate: anyio.Event | None = None
        self.writing = anyio.Event()

    async def _put(self, owner_tag: str, name: str, blob: bytes) -> None:
        self.writing.set()
        if self.gate is not None:
            await self.gate.wait()
        await super()._put(owner_tag, name, blob)


@dataclass
class Kit:
    registry: SessionRegistry[State]
    keeper: SnapshotKeeper
    store: GatedStore
    states: dict[str, State]

    async def called(self, key: str, value: bytes) -> State:
        """One call that changes the session `key` to `value`."""
        state = await self.registry.acquire(key)
        state.value = value
        self.registry.release(key)
        return state

    async def stored(self, key: str) -> bytes | None:
        snap = await self.store.load(SnapshotId("python", ANONYMOUS, key))
        return None if snap is None else snap.payload

    async def saved(self, key: str) -> None:
        """Until the session's background save has run (it was armed)."""
        assert self.registry.autosave is not None and self.registry.autosave.pending(key)
        await self.settled(key)

    async def settled(self, key: str) -> None:
        """Until the session has no save armed or in flight (polled: the saves run in the registry's loop)."""
        assert self.registry.autosave is not None
        for _ in range(2000):
            if not self.registry.autosave.pending(key):
                return
            await anyio.sleep(0.01)
        raise AssertionError(f"the save of {key!r} never ran")


@contextlib.asynccontextmanager
async def running(tmp_path: Path) -> AsyncIterator[Kit]:
    """A registry saving in the background, its loop running for the block."""
    states: dict[str, State] = {}

    async def make(key: str) -> State:
        return states.setdefault(key, State())

    store = GatedStore(str(tmp_path / "snaps"), Limits(per_session_bytes=16))
    keeper = SnapshotKeeper(store, "python", every_s=EVERY_S)
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=10)
    registry.keeper = keeper
    registry.autosave = Autosave(EVERY_S, registry.save_in_background)
    async with anyio.create_task_group() as tg:
        tg.start_soon(registry.autosave.run)
        yield Kit(registry, keeper, store, states)
        tg.cancel_scope.cancel()


async def test_a_burst_of_changes_is_saved_once_after_it(tmp_path: Path) -> None:
    async with running(tmp_path) as kit:
        for n in range(5):
            state = await kit.called("burst", b"v%d" % n)
        await kit.saved("burst")
        assert state.taken == [b"v4"] and await kit.stored("burst") == b"v4"
        await kit.called("burst", b"v5")  # a later change arms the next save
        await kit.saved("burst")
        assert state.taken == [b"v4", b"v5"] and await kit.stored("burst") == b"v5"


async def test_a_session_in_a_call_is_not_read_and_its_release_saves_it(tmp_path: Path) -> None:
    async with running(tmp_path) as kit:
        state = await kit.called("busy", b"before")
        await kit.registry.acquire("busy")  # a call starts before the save falls due
        state.value = b"midway"
        await kit.registry.save_in_background("busy")  # as the save falls due
        assert state.taken == [] and await kit.stored("busy") is None
        state.value = b"after"
        kit.registry.release("busy")
        await kit.saved("busy")
        assert state.taken == [b"after"]


async def test_a_read_only_call_arms_no_save(tmp_path: Path) -> None:
    async with running(tmp_path) as kit:
        await kit.registry.acquire("read")
        kit.registry.release("read", changed=False)
        assert kit.registry.autosave is not None and not kit.registry.autosave.pending("read")


@pytest.mark.parametrize("caught", ["in the sandbox", "writing to the store"])
async def test_a_session_cleaned_up_during_its_save_is_not_resurrected(tmp_path: Path, caught: str) -> None:
    async with running(tmp_path) as kit:
        gate = anyio.Event()  # the save waits where `caught` says until the cleanup is over
        if caught == "in the sandbox":
            kit.states["ended"] = State(gate=gate)
        else:
            kit.store.gate = gate
        state = await kit.called("ended", b"secret")
        await (state.started if caught == "in the sandbox" else kit.store.writing).wait()
        assert await kit.registry.close("ended")  # what cleanup_session does: close, then forget
        await kit.keeper.forget("ended", ANONYMOUS)
        gate.set()  # a save that were still running would write now
        await kit.settled("ended")
        assert await kit.stored("ended") is None


async def test_a_background_save_over_the_cap_is_told_once_and_a_good_one_clears_it(tmp_path: Path) -> None:
    async with running(tmp_path) as kit:
        await kit.called("big", b"small")
        await kit.saved("big")
        await kit.called("big", b"x" * 17)
        await kit.saved("big")
        told = kit.registry.take_unsaved("big")
        assert told == "the session's state is larger than the snapshot cap (1.52588e-05 MiB)"
        assert await kit.stored("big") == b"small"  # the last good snapshot stays
        await kit.called("big", b"y" * 17)
        await kit.saved("big")
        assert kit.registry.take_unsaved("big") is None  # the same reason again: not told twice
        await kit.called("big", b"fits")
        await kit.saved("big")
        await kit.called("big", b"z" * 17)
        await kit.saved("big")
        assert kit.registry.take_unsaved("big") == told  # saved in between: a new failure is news again
