"""Bounds on guessing admin keys at `/console/login`: failed logins counted per client address and over all
addresses together; past either bound every login (a right key too) is a 429 with `Retry-After` until the window
has room again.

Each replica counts the failures it saw in a sliding window (`LoginThrottle`). With a Redis store the fleet
counts them too (`FleetThrottle`): one counter per address and one over all, each an atomic INCR whose window
(`WINDOW_S`) starts at its first failure and ends with the key's expiry, so a guesser spreading tries over the
replicas meets the same bounds. A login is refused when either count says so. When Redis does not answer the
replica's own counts decide alone (logged once per outage): an operator is not locked out by the outage, and
a guesser still meets each replica's bounds. Memory is bounded: an address keeps at most `per_address` failure
times, and at most `addresses` addresses are tracked (the one least recently failing is forgotten first); the
Redis counters expire with their window.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import structlog
from redis.exceptions import RedisError

from toolkit.outage import Outage

log = structlog.get_logger(__name__)

PER_ADDRESS = 5
OVERALL = 100
WINDOW_S = 60.0
ADDRESSES = 10_000


def _wait(failures: deque[float], bound: int, window_s: float, now: float) -> float:
    """Seconds until `failures` (at most `bound`, oldest first) has room in the window; 0: room now."""
    if len(failures) < bound:
        return 0.0
    return max(0.0, failures[0] + window_s - now)


class LoginThrottle:
    def __init__(
        self,
        per_address: int = PER_ADDRESS,
        overall: int = OVERALL,
        window_s: float = WINDOW_S,
        addresses: int = ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_address, self.overall, self.window_s, self.addresses = per_address, overall, window_s, addresses
        self._clock = clock
        self._all: deque[float] = deque(maxlen=overall)
        self._by_address: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, address: str) -> int:
        """Whole seconds before `address` may try again; 0: it may try now."""
        now = self._clock()
        mine = _wait(self._by_address.get(address, deque()), self.per_address, self.window_s, now)
        wait = max(mine, _wait(self._all, self.overall, self.window_s, now))
        return math.ceil(wait)

    def failed(self, address: str) -> None:
        """One failed login from `address`."""
        now = self._clock()
        self._all.append(now)
        mine = self._by_address.pop(address, None) or deque(maxlen=self.per_address)
        mine.append(now)
        self._by_address[address] = mine  # now the most recent
        while len(self._by_address) > self.addresses:
            self._by_address.popitem(last=False)


_ADD = """
for i = 1, 2 do
  if redis.call('incr', KEYS[i]) == 1 then redis.call('pexpire', KEYS[i], ARGV[1]) end
end
"""
"""One failure counted for the address (KEYS[1]) and over all (KEYS[2]); a counter's first failure opens its
window of ARGV[1] ms."""
_WAIT = """
local wait = 0
for i = 1, 2 do
  if tonumber(redis.call('get', KEYS[i]) or '0') >= tonumber(ARGV[i]) then
    wait = math.max(wait, redis.call('pttl', KEYS[i]))
  end
end
return wait
"""
"""Milliseconds until both counters (address, all) are below their bounds (ARGV[1], ARGV[2]); 0: now."""


class FleetThrottle:
    """The replica's `local` counts, and with a Redis `client` the fleet's under `prefix` (a `redis.asyncio`
    client: the store's)."""

    def __init__(self, local: LoginThrottle, client: Any = None, prefix: str = "") -> None:
        self.local, self._client, self._prefix = local, client, prefix
        self._outage = Outage(log, "console.login_counts_local", "console.login_counts_fleet", (RedisError,))

    def _keys(self, address: str) -> tuple[str, str]:
        return f"{self._prefix}login-failed:{address}", f"{self._prefix}login-failed"

    async def retry_after(self, address: str) -> int:
        """Whole seconds before `address` may try again; 0: it may try now."""
        wait = self.local.retry_after(address)
        if self._client is not None:
            bounds = (self.local.per_address, self.local.overall)
            shared = await self._shared(self._client.eval(_WAIT, 2, *self._keys(address), *bounds))
            wait = max(wait, math.ceil(max(0, shared or 0) / 1000))
        return wait

    async def failed(self, address: str) -> None:
        """One failed login from `address`, counted here and in the fleet."""
        self.local.failed(address)
        if self._client is not None:
            window_ms = max(1, int(self.local.window_s * 1000))
            await self._shared(self._client.eval(_ADD, 2, *self._keys(address), window_ms))

    async def _shared(self, step: Any) -> Any:
        """The Redis step's answer; None when Redis did not answer (the local counts decide meanwhile)."""
        return (await self._outage.step(step))[1]
