"""The SCRIPTED stand-in's model: which reply a Harmony prompt gets, and the prefix cache it reports. Both of its
faces (`completions`, token ids; `harmony_chat`, chat messages rendered to Harmony) answer from one."""

from __future__ import annotations

from collections import deque
from typing import Any

from orchestrator.harmony import START, encoding
from orchestrator.worker.scripted.rules import Rule, Scenario, Stats, cached_prefix


class ScriptedModel:
    """Picks the reply for a prompt and reports prefix-cache hits against the prompts it has seen."""

    def __init__(self, scenario: Scenario, *, cache_prompts: int = 64) -> None:
        self.scenario = scenario
        self._seen: deque[list[int]] = deque(maxlen=cache_prompts)
        self.prompts: deque[list[int]] = deque(maxlen=cache_prompts)  # for tests to inspect
        self.options: deque[dict[str, Any]] = deque(maxlen=cache_prompts)  # each request's body but the prompt
        self._encoded: dict[str, list[int]] = {}
        self.stats = Stats()

    def _tokens(self, text: str) -> list[int]:
        if text not in self._encoded:
            self._encoded[text] = encoding().encode(text, allowed_special="all")
        return self._encoded[text]

    def reply(self, prompt: list[int]) -> list[int]:
        return self.reply_for(self.rule(prompt))

    def reply_for(self, rule: Rule | None) -> list[int]:
        """The reply's token ids: the rule's (its `tokens`, or its Harmony text encoded), else the default's."""
        if rule is None:
            return self._tokens(self.scenario.default)
        return list(rule.tokens) if rule.tokens is not None else self._tokens(rule.reply)

    def rule(self, prompt: list[int]) -> Rule | None:
        """The first rule matching the prompt's last message (and the assistant header after it)."""
        starts = [i for i, t in enumerate(prompt) if t == START]
        tail_from = starts[-2] if len(starts) >= 2 else 0
        return self.scenario.first(encoding().decode(prompt[tail_from:]))

    def cached(self, prompt: list[int]) -> int:
        return cached_prefix(self._seen, prompt)

    def encode_prompt_text(self, index: int) -> str:
        """A prompt this model saw, decoded (tests inspect what the orchestrator rendered)."""
        return encoding().decode(self.prompts[index])

    def remember(self, prompt: list[int], output: list[int]) -> None:
        self._seen.append(prompt + output)
        self.prompts.append(prompt)
