"""Where a tool session's saved state waits for its next call: sealed snapshots in a store chosen by name.

A snapshot is untrusted bytes made inside a sandbox; this package never looks inside the payload. It seals it
(who it belongs to, when it was taken, an HMAC with the fleet's secret), bounds it per session and per owner,
expires it, and refuses anything that does not unseal for the session asking. See `base` for the contract.
"""

from toolkit.snapshots.base import (
    STORES,
    Limits,
    Snapshot,
    SnapshotId,
    SnapshotRefused,
    SnapshotStore,
    open_snapshots,
)

__all__ = ["STORES", "Limits", "Snapshot", "SnapshotId", "SnapshotRefused", "SnapshotStore", "open_snapshots"]
