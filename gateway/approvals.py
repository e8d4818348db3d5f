"""Tool-definition pinning: record each upstream tool's definition; a changed one waits for an operator.

The first definitions seen for a namespace are recorded (trust on first use). Afterwards a tool whose
definition hash differs, or a tool that appears later, is *pending*: with `refuse` it is left out of
`tools/list` and a call to it is refused until an operator approves it (`POST /admin/tools/{ns}/approve`);
with `flag` it passes but is logged and counted. This defends against tools that change after review.

An operator may instead reject the pending definitions (`POST /admin/tools/{ns}/reject`): a rejected
definition stays out of `tools/list` and refused in both modes, until the upstream serves another one (which
is pending again). The approved definitions' text is kept beside their hashes (each cut at
`MAX_DEFINITION_CHARS`), so the console can show what changed as a line diff.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import structlog

from gateway.store import Store

log = structlog.get_logger(__name__)
MAX_DEFINITION_CHARS = 16_384  # per tool: bounds what the store and the admin API carry


def tool_hash(tool: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(tool, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def tool_text(tool: dict[str, Any]) -> str:
    """A definition as the lines an operator compares: indented JSON, keys sorted, cut at the bound."""
    text = json.dumps(tool, sort_keys=True, indent=2, ensure_ascii=False)
    return text if len(text) <= MAX_DEFINITION_CHARS else text[:MAX_DEFINITION_CHARS] + "\n... (cut here)"


class ToolGuard:
    def __init__(self, namespace: str, mode: str, store: Store) -> None:
        self.namespace = namespace
        self.mode = mode
        self._store = store
        self._blob = f"tools:{namespace}"
        self.approved: dict[str, str] = {}  # tool -> approved definition's hash
        self.pending: dict[str, str] = {}  # tool -> the hash the upstream serves now, not approved
        self.rejected: dict[str, str] = {}  # tool -> a hash an operator rejected
        self.held: set[str] = set()  # tools whose served definition is a rejected one
        self.texts: dict[str, str] = {}  # tool -> approved definition's text
        self.pending_texts: dict[str, str] = {}  # tool -> pending definition's text
        self.on_flag: Callable[[str], None] = lambda tool: None

    def take_over(self, prev: ToolGuard) -> None:
        """A reloaded namespace keeps what its previous guard learned."""
        self.approved, self.pending, self.rejected = prev.approved, prev.pending, prev.rejected
        self.held, self.texts, self.pending_texts = prev.held, prev.texts, prev.pending_texts

    async def _load(self) -> None:
        """What any gateway replica sharing the store approved or rejected since."""
        self.approved = await self._store.get_blob(self._blob) or self.approved
        self.rejected = await self._store.get_blob(f"{self._blob}:rejected") or self.rejected
        self.texts = await self._store.get_blob(f"{self._blob}:texts") or self.texts

    async def review(self, tools: list[Any]) -> list[Any]:
        """The tools a client may see; records first definitions and marks changed ones pending or held."""
        if self.mode == "off":
            return tools
        await self._load()
        named = [t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
        seen = {t["name"]: tool_hash(t) for t in named}
        if not self.approved:
            self.approved, self.texts = seen, {t["name"]: tool_text(t) for t in named}
            await self._save()
            log.info("tools.recorded", namespace=self.namespace, tools=sorted(seen))
            return tools
        changed = {name: h for name, h in seen.items() if self.approved.get(name) != h}
        self.held = {name for name, h in changed.items() if self.rejected.get(name) == h}
        waiting = {name: h for name, h in changed.items() if name not in self.held}
        for name in waiting.keys() - self.pending.keys():
            log.warning("tools.changed", namespace=self.namespace, tool=name, mode=self.mode)
            self.on_flag(name)
        self.pending = waiting
        self.pending_texts = {t["name"]: tool_text(t) for t in named if t["name"] in waiting}
        return [t for t in tools if not (isinstance(t, dict) and self.refused(t.get("name")))]

    def refused(self, name: object) -> bool:
        if self.mode == "off":
            return False
        return name in self.held or (self.mode == "refuse" and name in self.pending)

    async def approve(self) -> list[str]:
        """Accept every pending definition; returns the tools approved."""
        names = sorted(self.pending)
        await self._load()
        self.approved = {**self.approved, **self.pending}
        self.texts = {**self.texts, **self.pending_texts}
        self.pending, self.pending_texts = {}, {}
        await self._save()
        log.info("tools.approved", namespace=self.namespace, tools=names)
        return names

    async def reject(self) -> list[str]:
        """Refuse every pending definition for good; returns the tools rejected (held out until they change)."""
        names = sorted(self.pending)
        await self._load()
        self.rejected = {**self.rejected, **self.pending}
        self.held |= self.pending.keys()
        self.pending, self.pending_texts = {}, {}
        await self._save()
        log.info("tools.rejected", namespace=self.namespace, tools=names)
        return names

    async def _save(self) -> None:
        await self._store.put_blob(self._blob, self.approved)
        await self._store.put_blob(f"{self._blob}:rejected", self.rejected)
        await self._store.put_blob(f"{self._blob}:texts", self.texts)

    def report(self) -> dict[str, Any]:
        """`GET /admin/tools`'s entry: the hashes, and the texts an operator compares for each pending tool."""
        definitions = {n: {"approved": self.texts.get(n), "pending": t} for n, t in sorted(self.pending_texts.items())}
        held = {n: h for n, h in self.rejected.items() if n in self.held}
        return {"approved": self.approved, "pending": self.pending, "rejected": held, "definitions": definitions}
