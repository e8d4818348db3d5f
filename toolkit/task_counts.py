"""How many MCP tasks each owner has running: on this replica alone, or across the fleet in Redis.

`--max-tasks-per-owner` is the owner's (API key's) limit. Without a shared store each replica counts only its own
tasks, so an owner spread over N replicas may run N times the limit. With `--task-counts-url` every replica counts
in one Redis sorted set per owner: member the task id, score the end of its lease (Redis's own clock). Taking a
place is one script (drop lapsed leases, count, add), so two replicas cannot both take the last place. A replica
renews its running tasks' leases and removes each as it ends; the leases of a killed replica lapse on their own,
freeing its owners' places within `lease_s`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Protocol

import structlog

from toolkit.redis_client import redis_client

log = structlog.get_logger(__name__)

KEY = "toolfleet:tasks:"
LEASE_S = 30.0
"""How long a running task's place outlives the last renewal of its replica (renewed every third of it)."""

_TAKE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[1]) then return held end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return -1
"""
_RENEW = """
local t = redis.call('TIME')
local until_ms = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', until_ms, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
"""


class RunningCounts(Protocol):
    scope: str
    """Where the count holds, for the refusal's words: "on this replica" or "across the fleet"."""

    async def take(self, owner: str, task_id: str, limit: int) -> int | None:
        """Count `task_id` as running for `owner`: None, or how many the owner runs when that is its limit."""
        ...

    async def release(self, owner: str, task_id: str) -> None: ...

    async def renew(self, running: Mapping[str, str]) -> None:
        """Renew the places of the tasks running here (task id -> owner)."""
        ...


class ReplicaCounts:
    """Counts of this replica's tasks only (no shared store)."""

    scope = "on this replica"

    def __init__(self) -> None:
        self._running: dict[str, set[str]] = defaultdict(set)

    async def take(self, owner: str, task_id: str, limit: int) -> int | None:
        running = self._running[owner]
        if len(running) >= limit:
            return len(running)
        running.add(task_id)
        return None

    async def release(self, owner: str, task_id: str) -> None:
        self._running[owner].discard(task_id)
        if not self._running[owner]:
            del self._running[owner]

    async def renew(self, running: Mapping[str, str]) -> None:
        """Nothing lapses here: a replica's own counts end with it."""


class FleetCounts:
    """Counts of every replica's tasks, in the fleet's Redis (see the module's docstring)."""

    scope = "across the fleet"

    def __init__(self, url: str, lease_s: float = LEASE_S) -> None:
        self._redis: Any = redis_client(url)
        self._lease_ms = int(lease_s * 1000)

    async def take(self, owner: str, task_id: str, limit: int) -> int | None:
        held = int(await self._redis.eval(_TAKE, 1, KEY + owner, limit, task_id, self._lease_ms))
        return None if held < 0 else held

    async def release(self, owner: str, task_id: str) -> None:
        try:
            await self._redis.zrem(KEY + owner, task_id)
        except Exception as exc:  # its lease lapses instead: the place is freed within lease_s
            log.warning("tasks.release_failed", task_id=task_id, error=str(exc))

    async def renew(self, running: Mapping[str, str]) -> None:
        by_owner: dict[str, list[str]] = defaultdict(list)
        for task_id, owner in running.items():
            by_owner[owner].append(task_id)
        for owner, ids in by_owner.items():
            await self._redis.eval(_RENEW, 1, KEY + owner, self._lease_ms, *ids)


def running_counts(url: str | None) -> RunningCounts:
    """The fleet's counts in the Redis at `url`, or this replica's own without one."""
    return FleetCounts(url) if url else ReplicaCounts()
