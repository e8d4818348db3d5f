"""No snapshots: a session's state ends with its sandbox, as before snapshots existed."""

from __future__ import annotations

from toolkit.snapshots.base import Limits, Snapshot, SnapshotStore, Stored


class NoSnapshots(SnapshotStore):
    def __init__(self, where: str = "", limits: Limits | None = None) -> None:
        super().__init__(limits, secret=b"")

    @property
    def enabled(self) -> bool:
        return False

    async def save(self, snap: Snapshot) -> None:
        return None

    async def _put(self, owner_tag: str, name: str, blob: bytes) -> None:
        return None

    async def _get(self, owner_tag: str, name: str) -> bytes | None:
        return None

    async def _delete(self, owner_tag: str, name: str) -> None:
        return None

    async def _owned(self, owner_tag: str) -> list[Stored]:
        return []
