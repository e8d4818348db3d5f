"""The snapshot contract: ids, the sealed format, limits, and the store interface every backend fills in.

Sealed format (one blob): `TFSNAP1\\n`, a 4-byte big-endian header length, the header (JSON: namespace, owner, key,
taken_at, unsaved names, what took it, payload size and SHA-256), a 32-byte HMAC-SHA256 of header and payload
digest under the fleet's secret, then the payload. A writer without the secret cannot plant a snapshot; one session
cannot be handed another's (the header must name the session asking); truncation and bit flips fail the digest or
the HMAC.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from toolkit import registry
from toolkit.wire import fleet_secret

STORES: registry.Registry = {
    "none": "toolkit.snapshots.none:NoSnapshots",
    "dir": "toolkit.snapshots.directory:DirSnapshots",
    "redis": "toolkit.snapshots.redis:RedisSnapshots",
}
"""Snapshot store name -> implementation (`none` keeps no state across a session's end)."""

MAGIC = b"TFSNAP1\n"
_LEN = struct.Struct(">I")
_MAC = 32
MAX_HEADER = 64 * 1024


class SnapshotRefused(Exception):
    """A snapshot that must not be used or kept; `reason` is one word for metrics, the message is for the model."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SnapshotId:
    """Whose state: the tool namespace, the session's owner (the signed owner header) and its session key."""

    namespace: str
    owner: str
    key: str

    @property
    def name(self) -> str:
        """The storage name: a digest, so no owner or key text ever reaches a path or a Redis key."""
        return hashlib.sha256(f"{self.namespace}\0{self.owner}\0{self.key}".encode()).hexdigest()

    @property
    def owner_tag(self) -> str:
        return hashlib.sha256(f"{self.namespace}\0{self.owner}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Snapshot:
    id: SnapshotId
    payload: bytes
    taken_at: float = field(default_factory=time.time)
    unsaved: tuple[str, ...] = ()
    """Names the sandbox could not serialize: the restore notice lists them."""
    trigger: str = ""
    """What took it (`toolkit.snapshots.keeper.TRIGGERS`), for the restore's metrics; "" in older snapshots."""


@dataclass(frozen=True, slots=True)
class Limits:
    per_session_bytes: int = 256 * 1024 * 1024
    per_owner_bytes: int = 1024 * 1024 * 1024
    ttl_s: float = 7 * 24 * 3600.0


def seal(snap: Snapshot, secret: bytes) -> bytes:
    digest = hashlib.sha256(snap.payload).hexdigest()
    header = json.dumps(
        {
            "namespace": snap.id.namespace,
            "owner": snap.id.owner,
            "key": snap.id.key,
            "taken_at": snap.taken_at,
            "unsaved": list(snap.unsaved),
            "trigger": snap.trigger,
            "size": len(snap.payload),
            "sha256": digest,
        },
        separators=(",", ":"),
    ).encode()
    mac = hmac.new(secret, header + digest.encode(), hashlib.sha256).digest()
    return MAGIC + _LEN.pack(len(header)) + header + mac + snap.payload


def unseal(blob: bytes, expect: SnapshotId, secret: bytes, *, now: float, ttl_s: float) -> Snapshot:
    """The snapshot in `blob` if it is whole, signed by this fleet, for the session `expect`, and not expired."""
    header, mac, payload = _split(blob)
    try:
        meta: dict[str, Any] = json.loads(header)
        digest, taken_at, unsaved = str(meta["sha256"]), float(meta["taken_at"]), tuple(map(str, meta["unsaved"]))
        trigger = str(meta.get("trigger", ""))
        who = SnapshotId(str(meta["namespace"]), str(meta["owner"]), str(meta["key"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotRefused("corrupt", "the snapshot's header is not readable") from exc
    if not hmac.compare_digest(mac, hmac.new(secret, header + digest.encode(), hashlib.sha256).digest()):
        raise SnapshotRefused("unsigned", "the snapshot is not signed by this fleet")
    if len(payload) != meta.get("size") or hashlib.sha256(payload).hexdigest() != digest:
        raise SnapshotRefused("truncated", "the snapshot is incomplete or damaged")
    if who != expect:
        raise SnapshotRefused("foreign", "the snapshot belongs to another session")
    if now - taken_at > ttl_s:
        raise SnapshotRefused("expired", "the snapshot expired")
    return Snapshot(who, payload, taken_at, unsaved, trigger)


def _split(blob: bytes) -> tuple[bytes, bytes, bytes]:
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + _LEN.size:
        raise SnapshotRefused("corrupt", "the snapshot is not in toolfleet's format")
    (size,) = _LEN.unpack_from(blob, len(MAGIC))
    start = len(MAGIC) + _LEN.size
    if size > MAX_HEADER or len(blob) < start + size + _MAC:
        raise SnapshotRefused("truncated", "the snapshot is incomplete or damaged")
    return blob[start : start + size], blob[start + size : start + size + _MAC], blob[start + size + _MAC :]


@dataclass(frozen=True, slots=True)
class Stored:
    """One stored snapshot as a backend lists it, for the owner's budget and the sweep."""

    name: str
    size: int
    stored_at: float


class SnapshotStore(ABC):
    """Sealing, limits and expiry here; a backend only keeps named blobs grouped by owner."""

    def __init__(self, limits: Limits | None = None, secret: bytes | None = None) -> None:
        self.limits = limits or Limits()
        self._secret = secret if secret is not None else fleet_secret()

    @property
    def enabled(self) -> bool:
        return True

    async def save(self, snap: Snapshot) -> None:
        """Keep `snap`, replacing the session's last one. Over the per-session cap it is refused (`oversized`); to
        stay within the per-owner budget the owner's own oldest snapshots go first, never another owner's."""
        if len(snap.payload) > self.limits.per_session_bytes:
            mib = self.limits.per_session_bytes / 2**20
            raise SnapshotRefused("oversized", f"the session's state is larger than the snapshot cap ({mib:g} MiB)")
        blob = seal(snap, self._secret)
        budget = self.limits.per_owner_bytes - len(blob)
        kept = sorted(await self._owned(snap.id.owner_tag), key=lambda s: s.stored_at, reverse=True)
        for stored in kept:
            if stored.name == snap.id.name:
                continue
            budget -= stored.size
            if budget < 0:
                await self._delete(snap.id.owner_tag, stored.name)
        await self._put(snap.id.owner_tag, snap.id.name, blob)

    async def load(self, sid: SnapshotId) -> Snapshot | None:
        """The session's snapshot, None when it has none; a bad one is deleted and refused (`SnapshotRefused`)."""
        blob = await self._get(sid.owner_tag, sid.name)
        if blob is None:
            return None
        try:
            return unseal(blob, sid, self._secret, now=time.time(), ttl_s=self.limits.ttl_s)
        except SnapshotRefused:
            await self._delete(sid.owner_tag, sid.name)
            raise

    async def holds(self, sid: SnapshotId) -> bool:
        """Whether a snapshot is stored for `sid`, from the owner's listing (no blob is read)."""
        return any(stored.name == sid.name for stored in await self._owned(sid.owner_tag))

    async def delete(self, sid: SnapshotId) -> None:
        await self._delete(sid.owner_tag, sid.name)

    async def sweep(self) -> int:
        """Delete what outlived the TTL; returns how many. Backends with their own expiry may do nothing here."""
        return 0

    @abstractmethod
    async def _put(self, owner_tag: str, name: str, blob: bytes) -> None: ...

    @abstractmethod
    async def _get(self, owner_tag: str, name: str) -> bytes | None: ...

    @abstractmethod
    async def _delete(self, owner_tag: str, name: str) -> None: ...

    @abstractmethod
    async def _owned(self, owner_tag: str) -> list[Stored]: ...


def open_snapshots(name: str, where: str, limits: Limits | None = None) -> SnapshotStore:
    """The store configured by `name` (`none`, `dir` with a directory, `redis` with a URL) at `where`."""
    store: SnapshotStore = registry.load(STORES, name, "snapshot store")(where, limits)
    return store
