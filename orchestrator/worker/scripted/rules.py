"""The rule engine both SCRIPTED wire adapters share: a scenario file's rules, the first one whose `match`
regex is found in the text an adapter renders of the request, and the per-worker counters."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml


@dataclass
class Rule:
    match: re.Pattern[str]
    reply: Any  # Harmony text (completions) or {reasoning?, content?, tool_calls?} (chat)
    tokens: list[int] | None = None  # completions: reply with these token ids as they are
    status: int | None = None  # answer this HTTP status instead of a completion
    fail_after: int | None = None  # completions: stop the stream after this many tokens
    fail_mode: str = "drop"  # drop: close the connection; error: vLLM's in-stream error chunk
    delay_s: float | None = None  # completions: per-token delay for this rule

    @classmethod
    def from_dict(cls, r: dict[str, Any], flags: int, reply: Any) -> Rule:
        if r.get("fail_mode", "drop") not in ("drop", "error"):
            raise ValueError("fail_mode must be drop or error")
        return cls(
            re.compile(r["match"], flags),
            reply,
            r.get("tokens"),
            r.get("status"),
            r.get("fail_after"),
            r.get("fail_mode", "drop"),
            r.get("delay_s"),
        )


@dataclass
class Scenario:
    """A Harmony scenario: replies are Harmony text, matched against the prompt's last message."""

    rules: list[Rule] = field(default_factory=list)
    default: Any = "<|channel|>final<|message|>Hello from the scripted worker.<|return|>"
    model: str = "scripted-gpt-oss"
    token_delay_s: float = 0.0
    flags: ClassVar[int] = re.S

    @staticmethod
    def reply_of(value: Any) -> Any:
        """A rule's (or the default's) reply as the adapter reads it."""
        return "" if value is None else value

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scenario:
        blank = cls()
        rules = [Rule.from_dict(r, cls.flags, cls.reply_of(r.get("reply"))) for r in data.get("rules", [])]
        default = cls.reply_of(data["default"]) if data.get("default") is not None else blank.default
        return cls(rules, default, data.get("model", blank.model), float(data.get("token_delay_s", 0.0)))

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        return cls.from_dict(yaml.safe_load(Path(path).read_text()))

    def first(self, text: str) -> Rule | None:
        """The first rule whose `match` is found in `text` (None: the default reply)."""
        return next((rule for rule in self.rules if rule.match.search(text)), None)


@dataclass
class ChatScenario(Scenario):
    """A chat scenario: replies are already-parsed deltas, matched line by line (`^user: ...`)."""

    default: Any = field(default_factory=lambda: {"content": "Hello from the scripted chat worker."})
    model: str = "scripted-chat"
    flags: ClassVar[int] = re.S | re.M

    @staticmethod
    def reply_of(value: Any) -> Any:
        return dict(value or {})


@dataclass
class Stats:
    requests: int = 0
    completed: int = 0
    aborted: int = 0  # the client went away before the end of the stream
    failed: int = 0  # a scripted failure (status, drop or error chunk)
    in_flight: int = 0
    prefix_cache_queries: int = 0  # prompt tokens asked of the prefix cache (vLLM's counter of the same name)
    prefix_cache_hits: int = 0  # of them, those found cached

    def cache(self, prompt_tokens: int, cached: int) -> int:
        """Count one prompt's prefix-cache lookup as vLLM does (in tokens) and give back `cached`."""
        self.prefix_cache_queries += prompt_tokens
        self.prefix_cache_hits += cached
        return cached


def cached_prefix(seen: Iterable[list[int]], prompt: list[int]) -> int:
    """Prompt tokens a prefix cache would hold: the longest prefix shared with a sequence seen before
    (at least the last prompt token is always computed, as in vLLM)."""
    best = 0
    for tokens in seen:
        n = 0
        for a, b in zip(tokens, prompt, strict=False):
            if a != b:
                break
            n += 1
        best = max(best, n)
    return min(best, len(prompt) - 1) if prompt else 0
