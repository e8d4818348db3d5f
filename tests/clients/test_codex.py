"""Codex (npm `@openai/codex`, its default config: the `multi_agent_v1` namespace, `web_search`, `store: false`,
the whole history each turn) against the fleet. The scripted worker stands in for the model's choices."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

EXEC = (
    '<|channel|>commentary to=functions.exec_command <|constrain|>json<|message|>{"cmd": "echo probe-$((40 + 2))"}'
    "<|call|>"
)
SEARCH = '<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query": "tea"}<|call|>'
RULES = [  # the most advanced state of a conversation first
    ("functions\\.exec_command to=assistant.*probe-42", "<|channel|>final<|message|>The probe printed 42.<|return|>"),
    ("browser\\.search to=assistant.*Tea facts", "<|channel|>final<|message|>Tea is a drink 【0†L0-L1】.<|return|>"),
    (
        "<\\|start\\|>user<\\|message\\|>Run the probe",
        "<|channel|>analysis<|message|>A command will tell.<|end|><|start|>assistant" + EXEC,
    ),
    ("<\\|start\\|>user<\\|message\\|>Search the web", SEARCH),
    ("<\\|start\\|>user<\\|message\\|>What did the probe print", "<|channel|>final<|message|>It printed 42.<|return|>"),
]


def _items(events: list[dict], kind: str) -> list[dict]:
    return [e["item"] for e in events if e.get("type") == "item.completed" and e["item"].get("type") == kind]


def test_codex_runs_a_command_through_its_default_tools_and_resumes_the_session(codex, fleet):
    fleet.script(RULES)
    events = codex("--json", "--skip-git-repo-check", "-s", "danger-full-access", "Run the probe.")
    commands = _items(events, "command_execution")
    assert len(commands) == 1 and "probe-42" in commands[0]["aggregated_output"] and commands[0]["exit_code"] == 0
    assert [m["text"] for m in _items(events, "agent_message")] == ["The probe printed 42."]
    first = fleet.model.encode_prompt_text(-1)
    assert "namespace multi_agent_v1" in first  # Codex's namespace tool, shown to the model as one namespace

    events = codex("resume", "--last", "--json", "--skip-git-repo-check", "What did the probe print?")
    assert [m["text"] for m in _items(events, "agent_message")] == ["It printed 42."]
    resumed = fleet.model.encode_prompt_text(-1)
    assert "probe-42" in resumed and "The probe printed 42." in resumed  # store: false, the history resent


def test_codex_searches_the_web_through_the_gateway_browser(codex, fleet):
    fleet.script(RULES)
    events = codex("--json", "--skip-git-repo-check", "-s", "danger-full-access", "Search the web for tea.")
    searches = _items(events, "web_search")
    assert searches and searches[0]["query"] == "tea"
    answer = "Tea is a drink ([example.com](https://example.com/tea))."  # the citation as OpenAI's search writes it
    assert [m["text"] for m in _items(events, "agent_message")] == [answer]


PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from the patch\n*** End Patch\n"
PATCH_RULES = [
    ("functions\\.apply_patch to=assistant", "<|channel|>final<|message|>Patched.<|return|>"),
    ("to=functions\\.apply_patch<\\|message\\|>$", PATCH + "<|call|>"),  # the call again, under its lark grammar
    ("Add the file", "<|channel|>commentary to=functions.apply_patch<|message|>" + PATCH + "<|call|>"),
]


def test_codex_applies_a_patch_with_its_freeform_apply_patch_tool(codex, fleet):
    """A model Codex knows as a GPT-5 model: its `apply_patch` is a `custom` tool with a lark grammar, and
    it sends a client-run `tool_search` too."""
    fleet.script(PATCH_RULES)
    events = codex("--json", "--skip-git-repo-check", "-s", "danger-full-access", "-m", "gpt-5.5", "Add the file.")
    assert (codex.work / "hello.txt").read_text() == "hello from the patch\n"
    assert [m["text"] for m in _items(events, "agent_message")] == ["Patched."]
    assert _items(events, "file_change")
    grammar = fleet.model.options[-2]["structured_outputs"]["grammar"]
    assert grammar.startswith("start: begin_patch hunk+ end_patch")  # Codex's own grammar reached the worker


def _metric(fleet, name: str, **labels: str) -> float:
    """The sum of an orchestrator metric's samples that carry `labels`."""
    text = httpx.get(f"{fleet.url}/metrics", timeout=10).text
    samples = (s for family in text_string_to_metric_families(text) for s in family.samples)
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


@pytest.mark.parametrize("codex_provider", [{"supports_websockets": True}])
def test_codex_runs_its_tool_loop_over_websocket_mode(codex, fleet, codex_provider):
    """A provider with `supports_websockets`: Codex opens `ws://.../v1/responses`, prewarms with
    `generate: false`, then continues each `store: false` response by `previous_response_id`, sending only
    the new items (the connection keeps the rest). No response goes over HTTP."""
    fleet.script(RULES)
    events = codex("--json", "--skip-git-repo-check", "-s", "danger-full-access", "Run the probe.")
    commands = _items(events, "command_execution")
    assert len(commands) == 1 and "probe-42" in commands[0]["aggregated_output"] and commands[0]["exit_code"] == 0
    assert [m["text"] for m in _items(events, "agent_message")] == ["The probe printed 42."]
    last = fleet.model.encode_prompt_text(-1)  # the history the connection kept, then the command's output
    assert last.index("Run the probe.") < last.index("functions.exec_command") < last.index("probe-42")
    assert _metric(fleet, "toolfleet_orchestrator_responses_total", status="completed") == 3  # prewarm, 2 turns
    posts = _metric(fleet, "toolfleet_orchestrator_request_seconds_count", route="/v1/responses", method="POST")
    assert posts == 0
    assert _metric(fleet, "toolfleet_orchestrator_tokens_total", kind="cached") > 0  # the prewarm filled the cache


SUMMARY = "<|channel|>final<|message|>The user ran the probe; it printed probe-42.<|return|>"
COMPACT_RULES = [
    ("Compact this conversation", SUMMARY),  # the summarising turn (compaction.PROMPT)
    ("Summary of the earlier conversation.*printed probe-42", "<|channel|>final<|message|>Done: 42.<|return|>"),
    *RULES,
]


@pytest.mark.parametrize(
    "codex_provider",
    [{"name": "OpenAI"}, {"name": "azure", "supports_websockets": True}],  # Azure's way: store: true, here over WS
    ids=["openai-http", "azure-websocket"],
)
def test_codex_compacts_remotely_when_its_context_passes_the_limit(codex, fleet, codex_provider):
    """Codex 0.171 compacts remotely (for a provider it takes for OpenAI's or Azure's) by sending a
    `compaction_trigger` as the last input item and expecting exactly one `compaction` output item; the
    summary is the model's own, and the next turn reads the user's message and the summary instead."""
    fleet.script(COMPACT_RULES)
    limit = "model_auto_compact_token_limit=7500"  # Codex's own instructions and tools are ~7000 tokens
    events = codex("--json", "--skip-git-repo-check", "-s", "danger-full-access", "-c", limit, "Run the probe.")
    assert [m["text"] for m in _items(events, "agent_message")] == ["Done: 42."]
    summarising, after = fleet.model.encode_prompt_text(-2), fleet.model.encode_prompt_text(-1)
    assert "Compact this conversation" in summarising and "probe-42" in summarising  # after the command ran
    assert "Run the probe." in after and "Chunk ID" not in after  # the command's output is in the summary only
    assert len(fleet.model.prompts[-1]) < len(fleet.model.prompts[-2]) * 0.6
