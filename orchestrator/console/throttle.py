"""Bounds on guessing admin keys at `/console/login`: failed logins counted per client address and over all
addresses together, each in a sliding window; past either bound every login (a right key too) is a 429 with
`Retry-After` until the window has room again.

The overall bound is per replica (each replica counts the failures it saw). Memory is bounded: an address
keeps at most `per_address` failure times, and at most `addresses` addresses are tracked (the one least
recently failing is forgotten first).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

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
