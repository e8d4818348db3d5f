"""One script language for both scripted workers, so a conversation case runs on the Harmony path
(`/v1/completions`, Harmony text) and on the chat path (`/v1/chat/completions`, parsed deltas) alike.

A case's rules are (match, reply) pairs: `User("compute")`, `ToolSaid("python", "42")` or `Forced()`
match the model's latest input; `Say("text", think=...)` and `Call(recipient, args, think=...)` are what
the model does. `harmony_rules` / `chat_rules` compile them for the two scripted workers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.chat import chat_name


@dataclass(frozen=True)
class User:
    pattern: str


@dataclass(frozen=True)
class ToolSaid:
    recipient: str
    pattern: str = ""


@dataclass(frozen=True)
class Forced:
    """The turn where tool_choice forces a call (Harmony: the prefilled header; chat: tool_choice sent)."""


@dataclass(frozen=True)
class Say:
    text: str
    think: str | None = None


@dataclass(frozen=True)
class Call:
    recipient: str
    args: dict[str, Any] | str  # a str is sent as written (e.g. broken JSON)
    think: str | None = None


Match = User | ToolSaid | Forced
Reply = Say | Call


def _harmony_match(m: Match) -> str:
    if isinstance(m, User):
        return r"user<\|message\|>.*" + m.pattern
    if isinstance(m, ToolSaid):
        return re.escape(m.recipient) + r" to=assistant.*" + m.pattern
    return r"(commentary|analysis) to=$"


def _chat_match(m: Match) -> str:
    if isinstance(m, User):
        return r"^user: .*" + m.pattern
    if isinstance(m, ToolSaid):
        return "^tool " + re.escape(chat_name(m.recipient)) + ": .*" + m.pattern
    return r"^tool_choice: "


def _args_text(call: Call) -> str:
    return call.args if isinstance(call.args, str) else json.dumps(call.args)


def _harmony_reply(reply: Reply, forced: bool) -> str:
    think = f"<|channel|>analysis<|message|>{reply.think}<|end|><|start|>assistant" if reply.think else ""
    if isinstance(reply, Say):
        return think + f"<|channel|>final<|message|>{reply.text}<|return|>"
    if reply.recipient == "python":
        body = f"<|message|>{reply.args['code'] if isinstance(reply.args, dict) else reply.args}<|call|>"
        return ("" if forced else think + "<|channel|>analysis to=python") + body
    channel = "analysis" if reply.recipient.startswith("browser.") else "commentary"
    body = f" <|constrain|>json<|message|>{_args_text(reply)}<|call|>"
    return (reply.recipient if forced else f"{think}<|channel|>{channel} to={reply.recipient}") + body


def _chat_reply(reply: Reply) -> dict[str, Any]:
    out: dict[str, Any] = {"reasoning": reply.think} if reply.think else {}
    if isinstance(reply, Say):
        return out | {"content": reply.text}
    return out | {"tool_calls": [{"name": chat_name(reply.recipient), "arguments": _args_text(reply)}]}


def harmony_rules(rules: list[tuple[Match, Reply]]) -> list[tuple[str, str]]:
    return [(_harmony_match(m), _harmony_reply(r, isinstance(m, Forced))) for m, r in rules]


def chat_rules(rules: list[tuple[Match, Reply]]) -> list[dict[str, Any]]:
    return [{"match": _chat_match(m), "reply": _chat_reply(r)} for m, r in rules]
