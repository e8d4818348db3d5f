"""Per-key limits: requests per second (a token bucket per key) and responses running at once per key.

Both are counted per replica: N replicas behind a balancer admit up to N times the figure. That keeps
the check off the shared store's path; an operator who needs one fleet-wide figure divides it by N.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from orchestrator.schema import RequestError

_IDLE_BUCKETS = 4096  # forget full buckets beyond this many keys (a full bucket is the default state)


class LimitExceeded(RequestError):
    """HTTP 429 with `retry-after`, in OpenAI's rate-limit error shape."""

    etype = "requests"

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message, None, 429, "rate_limit_exceeded")
        self.headers = {"retry-after": str(max(1, math.ceil(retry_after_s)))}


@dataclass
class _Bucket:
    tokens: float
    at: float


class RequestRate:
    """`rps` requests per second per key with bursts of `burst`; rps 0 admits everything."""

    def __init__(self, rps: float, burst: int = 0) -> None:
        self.rps = rps
        self.burst = float(burst or max(1, math.ceil(2 * rps)))
        self._buckets: dict[str, _Bucket] = {}

    def admit(self, key: str) -> None:
        """Take one token of `key`'s bucket; raises LimitExceeded when it is empty."""
        if self.rps <= 0:
            return
        now = time.monotonic()
        b = self._buckets.get(key) or _Bucket(self.burst, now)
        b.tokens = min(self.burst, b.tokens + (now - b.at) * self.rps)
        b.at = now
        if b.tokens < 1:
            self._buckets[key] = b
            wait = (1 - b.tokens) / self.rps
            raise LimitExceeded(f"Rate limit reached: {self.rps:g} requests per second per API key.", wait)
        b.tokens -= 1
        self._buckets[key] = b
        if len(self._buckets) > _IDLE_BUCKETS:
            self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        for key in [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * self.rps >= self.burst]:
            del self._buckets[key]


def check_running(running: int, limit: int) -> None:
    """Refuse a new response when the key already has `limit` running (limit 0: no limit)."""
    if limit and running >= limit:
        raise LimitExceeded(f"Too many responses running at once: at most {limit} per API key.", 1.0)
