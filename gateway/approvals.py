"""Tool-definition pinning: record a hash of each upstream tool; a changed definition waits for approval.

The first definitions seen for a namespace are recorded (trust on first use). Afterwards a tool whose
definition hash differs, or a tool that appears later, is *pending*: with `refuse` it is left out of
`tools/list` and a call to it is refused until an operator approves it (`POST /admin/tools/{ns}/approve`);
with `flag` it passes but is logged and counted. This defends against tools that change after review.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import structlog

from gateway.store import Store

log = structlog.get_logger(__name__)


def tool_hash(tool: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(tool, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class ToolGuard:
    def __init__(self, namespace: str, mode: str, store: Store) -> None:
        self.namespace = namespace
        self.mode = mode
        self._store = store
        self._blob = f"tools:{namespace}"
        self.approved: dict[str, str] = {}
        self.pending: dict[str, str] = {}
        self.on_flag: Callable[[str], None] = lambda tool: None

    async def review(self, tools: list[Any]) -> list[Any]:
        """The tools a client may see; records first definitions and marks changed ones pending."""
        if self.mode == "off":
            return tools
        self.approved = await self._store.get_blob(self._blob) or self.approved
        seen = {t["name"]: tool_hash(t) for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)}
        if not self.approved:
            self.approved = seen
            await self._store.put_blob(self._blob, seen)
            log.info("tools.recorded", namespace=self.namespace, tools=sorted(seen))
            return tools
        changed = {name: h for name, h in seen.items() if self.approved.get(name) != h}
        for name in changed.keys() - self.pending.keys():
            log.warning("tools.changed", namespace=self.namespace, tool=name, mode=self.mode)
            self.on_flag(name)
        self.pending = changed
        if self.mode != "refuse" or not changed:
            return tools
        return [t for t in tools if not (isinstance(t, dict) and t.get("name") in changed)]

    def refused(self, name: object) -> bool:
        return self.mode == "refuse" and name in self.pending

    async def approve(self) -> list[str]:
        """Accept every pending definition; returns the tools approved."""
        names = sorted(self.pending)
        self.approved = {**(await self._store.get_blob(self._blob) or self.approved), **self.pending}
        await self._store.put_blob(self._blob, self.approved)
        self.pending = {}
        log.info("tools.approved", namespace=self.namespace, tools=names)
        return names
