"""What the session registry calls to save a session's state as it goes and to bring it back on its next call.

The state's own `snapshot`/`restore` run inside its sandbox; this side only moves the opaque bytes between the
sandbox and the store, and words what happened for the model: a restore notice, or why none was possible.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import anyio
import structlog

from toolkit.snapshots.base import Snapshot, SnapshotId, SnapshotRefused, SnapshotStore

log = structlog.get_logger(__name__)

NEVER_RESTORED = "running processes, open files"
SWEEP_INTERVAL_S = 3600.0
"""How often expired snapshots are deleted (a TTL is days long: an hour late is no matter)."""


@runtime_checkable
class Snapshottable(Protocol):
    async def snapshot(self) -> tuple[bytes, list[str]]: ...
    async def restore(self, payload: bytes) -> list[str]: ...


class SnapshotKeeper:
    """Saves and restores sessions of one tool namespace in `store`."""

    def __init__(self, store: SnapshotStore, namespace: str) -> None:
        self.store = store
        self.namespace = namespace

    def _id(self, key: str, owner: str) -> SnapshotId:
        return SnapshotId(self.namespace, owner, key)

    async def keep(self, key: str, owner: str, state: object) -> str | None:
        """Save the session before its sandbox goes; why it was not saved (oversized, the sandbox could not pickle
        it), for its next call to hear, or None."""
        if not self.store.enabled or not isinstance(state, Snapshottable):
            return None
        start = time.perf_counter()
        try:
            payload, unsaved = await state.snapshot()
            await self.store.save(Snapshot(self._id(key, owner), payload, unsaved=tuple(unsaved)))
        except SnapshotRefused as exc:
            log.warning("snapshot.refused", session_id=key, reason=exc.reason, error=str(exc))
            return str(exc)
        except Exception as exc:  # the sandbox could not pickle, or died
            log.warning("snapshot.failed", session_id=key, error=f"{type(exc).__name__}: {exc}")
            return f"the sandbox could not snapshot it ({type(exc).__name__})"
        ms = round((time.perf_counter() - start) * 1000, 1)
        log.info("snapshot.saved", session_id=key, bytes=len(payload), unsaved=unsaved, ms=ms)
        return None

    async def bring_back(self, key: str, owner: str, state: object) -> tuple[str | None, str | None]:
        """Restore the session's snapshot into its new `state`: (the notice line, None) when restored, (None,
        why not) when a snapshot was there but refused, (None, None) when there was none."""
        if not self.store.enabled or not isinstance(state, Snapshottable):
            return None, None
        try:
            snap = await self.store.load(self._id(key, owner))
            if snap is None:
                return None, None
            missing = await state.restore(snap.payload)
        except SnapshotRefused as exc:
            log.warning("snapshot.refused", session_id=key, reason=exc.reason, error=str(exc))
            return None, str(exc)
        except Exception as exc:  # the sandbox could not load it
            log.warning("snapshot.failed", session_id=key, error=f"{type(exc).__name__}: {exc}")
            return None, f"the sandbox could not load it ({type(exc).__name__})"
        log.info("snapshot.restored", session_id=key, bytes=len(snap.payload))
        when = time.strftime("%H:%M:%S", time.gmtime(snap.taken_at))
        lost = ", ".join([*snap.unsaved, *missing, NEVER_RESTORED])
        return f"[restored from a snapshot of {when} UTC; not restored: {lost}]\n", None

    async def has(self, key: str, owner: str) -> bool:
        """Whether the session has a snapshot to restore (not yet checked: restoring it may still refuse it)."""
        return self.store.enabled and await self.store.holds(self._id(key, owner))

    async def forget(self, key: str, owner: str) -> None:
        """The session was ended on purpose: its snapshot goes too."""
        if self.store.enabled:
            await self.store.delete(self._id(key, owner))

    async def sweep_forever(self, interval_s: float = SWEEP_INTERVAL_S) -> None:
        """Delete expired snapshots, such as those of sessions never called again (a dir store keeps them
        otherwise; Redis expires its own). A failed sweep is logged and tried again: it must not stop the server."""
        while True:
            try:
                removed = await self.store.sweep()
            except Exception as exc:
                log.warning("snapshot.sweep_failed", error=f"{type(exc).__name__}: {exc}")
            else:
                log.info("snapshot.swept", removed=removed)
            await anyio.sleep(interval_s)
