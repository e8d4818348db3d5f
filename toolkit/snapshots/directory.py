"""Snapshots as files under one directory: a volume on one host, or a shared filesystem every replica mounts.

Layout `ROOT/<owner tag>/<name>.snap`, both digests. A write goes to a temp file in the same directory and is
renamed over the old one, so a reader (another replica) sees the old snapshot or the new, never half of one.
File work runs in a thread: a 100 MiB write must not stall the event loop.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

import anyio

from toolkit.snapshots.base import Limits, SnapshotStore, Stored

SUFFIX = ".snap"


class DirSnapshots(SnapshotStore):
    def __init__(self, where: str, limits: Limits | None = None, secret: bytes | None = None) -> None:
        super().__init__(limits, secret)
        self.root = Path(where)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, owner_tag: str, name: str) -> Path:
        return self.root / owner_tag / f"{name}{SUFFIX}"

    async def _put(self, owner_tag: str, name: str, blob: bytes) -> None:
        await anyio.to_thread.run_sync(self._write, self._path(owner_tag, name), blob)

    @staticmethod
    def _write(path: Path, blob: bytes) -> None:
        path.parent.mkdir(exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    async def _get(self, owner_tag: str, name: str) -> bytes | None:
        return await anyio.to_thread.run_sync(self._read, self._path(owner_tag, name))

    @staticmethod
    def _read(path: Path) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read()

    async def _delete(self, owner_tag: str, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await anyio.to_thread.run_sync(os.unlink, self._path(owner_tag, name))

    async def _owned(self, owner_tag: str) -> list[Stored]:
        return await anyio.to_thread.run_sync(self._list, self.root / owner_tag)

    @staticmethod
    def _list(folder: Path) -> list[Stored]:
        found: list[Stored] = []
        with contextlib.suppress(FileNotFoundError), os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(SUFFIX) and entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    found.append(Stored(entry.name.removesuffix(SUFFIX), st.st_size, st.st_mtime))
        return found

    async def sweep(self) -> int:
        return await anyio.to_thread.run_sync(self._sweep, time.time() - self.limits.ttl_s)

    def _sweep(self, before: float) -> int:
        """Remove expired snapshots, and temp files of writes that died midway (an hour old: no write takes that)."""
        removed, stale = 0, time.time() - 3600
        for path in self.root.glob("*/*"):
            with contextlib.suppress(FileNotFoundError):
                mtime = path.lstat().st_mtime
                if mtime < before or (path.name.startswith(".part-") and mtime < stale):
                    path.unlink()
                    removed += 1
        return removed
