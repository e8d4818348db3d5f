"""A dependency's outage logged once, not once per try: a replica that polls a shared store every few seconds
would otherwise write a warning each time while the store is away, burying the line that said when it went."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from structlog.typing import FilteringBoundLogger

T = TypeVar("T")


class Outage:
    """Steps through a dependency that may be away: the first failing step of an outage logs `lost` (a warning
    with the error) to the user's `log`, the first step through after it logs `back`; the ones between are quiet."""

    def __init__(
        self, log: FilteringBoundLogger, lost: str, back: str, errors: tuple[type[Exception], ...] = (Exception,)
    ) -> None:
        self.log, self.lost, self.back, self.errors = log, lost, back, errors
        self.away = False

    async def step(self, step: Awaitable[T]) -> tuple[bool, T | None]:
        """(True, its answer) when `step` went through; (False, None) when it failed with one of `errors`."""
        try:
            answer = await step
        except self.errors as exc:
            if not self.away:
                self.log.warning(self.lost, error=str(exc) or type(exc).__name__)
            self.away = True
            return False, None
        if self.away:
            self.log.info(self.back)
            self.away = False
        return True, answer
