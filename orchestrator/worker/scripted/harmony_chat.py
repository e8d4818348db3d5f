"""The SCRIPTED Harmony stand-in's `/v1/chat/completions`, served as vLLM serves gpt-oss: so a client whose
default is chat completions (LangChain's `ChatOpenAI()`, `litellm.completion`) works against the default fleet.

The messages are rendered to a Harmony prompt with the orchestrator's own renderer (`orchestrator.harmony`):
the system message (`reasoning_effort`, today's date), a developer message with a leading `system` /
`developer` message's text and the function `tools`, then each message (an assistant's `reasoning` to the
analysis channel, its `content` to final, or to commentary beside its `tool_calls`, each call to
`functions.NAME` as JSON; a `tool` message from `functions.NAME`). The scenario's rules match that prompt
exactly as on `/v1/completions`, and the reply's tokens are parsed with the orchestrator's `TurnParser`:
the analysis channel (and a call to a built-in tool, which chat completions cannot carry) becomes
`reasoning` (vLLM 0.32's field; clients such as LiteLLM show it as `reasoning_content`), the final channel
and a preamble `content`, and a call to `functions.NAME` a `tool_calls` entry, one chunk per token as vLLM
streams it. Usage counts the real Harmony tokens.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.worker.scripted.chat import Answer, Steps, answer_of
from orchestrator.worker.scripted.model import ScriptedModel
from orchestrator.worker.scripted.rules import Rule, Scenario, Stats

FUNCTIONS = "functions."


def prompt_of(body: dict[str, Any]) -> list[int]:
    """The Harmony prompt vLLM would render for a chat body; a ValueError names what it cannot render."""
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in h.EFFORTS:
        raise ValueError(f"reasoning_effort {effort!r} is not one of {sorted(h.EFFORTS)}")
    messages = list(body["messages"])
    instructions = None
    if messages and messages[0].get("role") in ("system", "developer"):
        instructions = _text(messages.pop(0))
    date = time.strftime("%Y-%m-%d", time.gmtime())
    out = [h.system_message(effort=effort, date=date, namespaces=[])]
    developer = h.developer_message(instructions, _functions(body.get("tools")))
    if developer is not None:
        out.append(developer)
    names = {c.get("id"): (c.get("function") or {}).get("name") for m in messages for c in m.get("tool_calls") or []}
    for message in messages:
        out += _harmony(message, names)
    return h.render(out)


def _functions(tools: Any) -> list[dict[str, Any]]:
    functions = []
    for tool in tools or []:
        if tool.get("type") != "function":
            raise ValueError(f"tool type {tool.get('type')!r} is not supported: chat completions take functions")
        functions.append(tool["function"])
    return functions


def _text(message: dict[str, Any]) -> str:
    """A message's text: a string, or its text parts joined (the stand-in reads no other part)."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    for part in content:
        if part.get("type") != "text":
            raise ValueError(f"content part type {part.get('type')!r} is not supported by the Harmony stand-in")
    return "".join(part.get("text", "") for part in content)


def _harmony(message: dict[str, Any], names: dict[Any, Any]) -> list[Message]:
    """One chat message as the Harmony messages gpt-oss was trained on."""
    role, text = message.get("role"), _text(message)
    if role == "user":
        return [h.user(text)]
    if role in ("system", "developer"):
        developer = h.developer_message(text, [])
        return [developer] if developer is not None else []
    if role == "tool":
        return [h.tool_result(f"{FUNCTIONS}{names.get(message.get('tool_call_id'))}", text)]
    if role != "assistant":
        raise ValueError(f"message role {role!r} is not supported")
    out = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        out.append(h.assistant(reasoning, "analysis"))
    calls = message.get("tool_calls") or []
    if text:
        out.append(h.assistant(text, "commentary" if calls else "final"))
    for call in calls:
        function = call.get("function") or {}
        recipient = f"{FUNCTIONS}{function.get('name')}"
        out.append(h.assistant(function.get("arguments") or "", "commentary", recipient, "json"))
    return out


def steps_of(tokens: list[int]) -> Steps:
    """The reply's tokens as vLLM streams them: one (delta, token ids) step per token of text; a header's
    tokens go with the step after them (a tool call's opening chunk), the stop token with the last one."""
    parser = h.TurnParser()
    steps: Steps = []
    pending: list[int] = []
    calls = 0
    for token in tokens:
        pending.append(token)
        started, delta, _ = parser.feed(token)
        header = parser.header
        if started is not None and (started.recipient or "").startswith(FUNCTIONS):
            steps.append(({"tool_calls": [_call_head(calls, started.recipient or "")]}, pending))
            pending, calls = [], calls + 1
        elif delta and header is not None:
            steps.append((_delta(header, delta, calls - 1), pending))
            pending = []
    if pending and steps:
        steps[-1][1].extend(pending)
    elif pending:
        steps.append(({}, pending))
    return steps


def _call_head(index: int, recipient: str) -> dict[str, Any]:
    function = {"name": recipient.removeprefix(FUNCTIONS), "arguments": ""}
    return {"index": index, "id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}", "type": "function", "function": function}


def _delta(header: h.Header, text: str, call: int) -> dict[str, Any]:
    if (header.recipient or "").startswith(FUNCTIONS):
        return {"tool_calls": [{"index": call, "function": {"arguments": text}}]}
    if header.channel == "final" or (header.channel == "commentary" and not header.recipient):
        return {"content": text}
    return {"reasoning": text}


class HarmonyChat:
    """The chat face of a `ScriptedModel`: its scenario, counters and prefix cache, a chat body's prompt."""

    def __init__(self, model: ScriptedModel, *, keep: int = 64) -> None:
        self.model = model
        self.requests: deque[dict[str, Any]] = deque(maxlen=keep)  # bodies, for tests to inspect

    @property
    def scenario(self) -> Scenario:
        return self.model.scenario

    @property
    def stats(self) -> Stats:
        return self.model.stats

    def rule(self, body: dict[str, Any]) -> Rule | None:
        return self.model.rule(prompt_of(body))

    def answer(self, body: dict[str, Any], rule: Rule | None) -> Answer:
        prompt = prompt_of(body)
        reply = self.model.reply_for(rule)
        end = next((i + 1 for i, token in enumerate(reply) if token in h.STOP_TOKENS), len(reply))
        cached = self.model.stats.cache(len(prompt), self.model.cached(prompt))
        done = answer_of(body, prompt, steps_of(reply[:end]), cached, self.scenario.model)
        self.model.remember(prompt, done.output)
        return done
