"""Per-key limits: requests per second (a token bucket per key), model turns running at once per key and
WebSocket connections open at once per key.

All are counted per replica: N replicas behind a balancer admit up to N times the figure. That keeps
the check off the shared store's path; an operator who needs one fleet-wide figure divides it by N.

A slot (`Slots.take`) is checked and counted in one step with no await between, so a burst of requests
cannot all pass the check before any of them is counted; whoever takes one releases it in a `finally`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from orchestrator.errors import RequestError

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

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
        self.refused: Callable[[str], None] = lambda key: None  # told of each refusal (`usage`)

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
            self.refused(key)
            raise LimitExceeded(f"Rate limit reached: {self.rps:g} requests per second per API key.", wait)
        b.tokens -= 1
        self._buckets[key] = b
        if len(self._buckets) > _IDLE_BUCKETS:
            self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        for key in [k for k, b in self._buckets.items() if b.tokens + (now - b.at) * self.rps >= self.burst]:
            del self._buckets[key]


class Slots:
    """At most `limit` held at once per key (0: no limit), each taken by `take` and given back by its `Slot`."""

    def __init__(self, limit: int, refusal: str) -> None:
        self.limit = limit
        self.refusal = refusal  # the 429's message; `{limit}` is filled in
        self._held: Counter[str] = Counter()
        self.refused: Callable[[str], None] = lambda key: None  # told of each refusal (`usage`)

    def take(self, key: str) -> Slot:
        """One of `key`'s slots, or LimitExceeded when all are held. Synchronous on purpose: the check and
        the count happen with no await between them, so concurrent requests cannot all pass the check."""
        if self.limit and self._held[key] >= self.limit:
            self.refused(key)
            raise LimitExceeded(self.refusal.format(limit=self.limit), 1.0)
        self._held[key] += 1
        return Slot(self, key)

    def _give_back(self, key: str) -> None:
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]


class Slot:
    """One taken slot; `release` gives it back once, however often it is called (a `with` block calls it)."""

    def __init__(self, slots: Slots, key: str) -> None:
        self._slots: Slots | None = slots
        self._key = key

    def release(self) -> None:
        if self._slots is not None:
            self._slots._give_back(self._key)
            self._slots = None

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


@dataclass
class KeyLimits:
    """Every per-key limit of one replica: the request rate (checked by the auth middleware on each request
    and on each WebSocket `response.create`), the model turns running (responses, compactions, relayed
    chat completions, together) and the WebSocket connections open."""

    rate: RequestRate
    running: Slots
    sockets: Slots

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> KeyLimits:
        return cls(
            RequestRate(settings.rate_limit_rps, settings.rate_limit_burst),
            Slots(
                settings.max_concurrent_per_key,
                "Too many responses running at once: at most {limit} per API key"
                " (responses, compactions and chat completions together).",
            ),
            Slots(
                settings.max_sockets_per_key,
                "Too many WebSocket connections open at once: at most {limit} per API key.",
            ),
        )

    def count_refusals(self, refused: Callable[[str, str], None]) -> None:
        """Tell `refused(key, kind)` of each 429 (kinds: rate, running, sockets), for the usage per key."""
        self.rate.refused = lambda key: refused(key, "rate")
        self.running.refused = lambda key: refused(key, "running")
        self.sockets.refused = lambda key: refused(key, "sockets")
