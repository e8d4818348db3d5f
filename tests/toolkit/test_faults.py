"""The kit's `@kit.tool` and its one fault mapping (`Faults`): each kind of backend failure is answered in its
own words and does to the session what it says; a tool lists only its body's arguments and `session_handle`.

A real `ToolServer` (served by uvicorn on loopback, in this process so the test can see each session's state)
with two tools, `count` and `peek`, whose operations raise the fault the caller names; a real `mcp` 2.x client
calls them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from prometheus_client.parser import text_string_to_metric_families

from tests.support.asgi import serve_asgi
from tests.support.mcp2 import mcp_session
from toolkit.server import Faults, Reply, ToolServer
from toolkit.settings import ToolServerSettings
from toolkit.signature import Op


class Misuse(Exception):
    pass


class Broken(Exception):
    pass


class Stopped(Exception):
    pass


class Died(Exception):
    pass


FAULTS = Faults(
    "counter",
    usage=(Misuse,),
    unavailable=(Broken,),
    gone=(Stopped,),
    lost=(Died,),
    loses="counts",
    dies="the counting process",
    redo="Count again if needed",
)
RAISES = {
    "usage": lambda: Misuse("there is no count below zero"),
    "unavailable": lambda: Broken("the counting engine is down"),
    "gone": lambda: Stopped("the counter stopped"),
    "lost": lambda: Died("killed for memory"),
}


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


COUNTERS: dict[str, list[Counter]] = {}
"""Every state each session was given, oldest first."""
REFUSED: set[str] = set()
"""Sessions whose next state cannot start."""


async def _new_counter(key: str) -> Counter:
    if key in REFUSED:
        raise Broken("no room for another counter")
    COUNTERS.setdefault(key, []).append(counter := Counter())
    return counter


def _demo() -> ToolServer[Counter]:
    mcp = MCPServer("demo")
    kit: ToolServer[Counter] = ToolServer(mcp, ToolServerSettings(), _new_counter)

    @kit.tool("count", FAULTS, step="counter.step")
    def count(fault: str = "", by: int = 1) -> Op[Counter, Reply]:
        """Count `by` up in the caller's session, or fail as `fault` says."""
        if by < 1:
            raise ToolError("a count goes up by 1 or more")

        async def step(counter: Counter) -> Reply:
            if fault:
                raise RAISES[fault]()
            counter.n += by
            return Reply(f"count {counter.n}", {"count": counter.n})

        return step

    @kit.tool("peek", FAULTS)
    def peek(fault: str = "") -> Op[Counter, dict[str, int]]:
        """The session's count, as a plain structured answer (not a `Reply`)."""

        async def look(counter: Counter) -> dict[str, int]:
            if fault:
                raise RAISES[fault]()
            return {"count": counter.n}

        return look

    return kit


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """One server for the module; each test keeps to a session of its own."""
    app = _demo().build_app()
    with serve_asgi(app) as base:
        yield base


@pytest.fixture
def sid() -> str:
    return uuid.uuid4().hex


async def _calls(url: str, sid: str, *calls: tuple[str, dict[str, Any]]) -> list[CallToolResult]:
    async with mcp_session(url, "streamable-http", {"x-session-id": sid}) as session:
        return [await session.call_tool(name, args) for name, args in calls]


def _text(result: CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


def _error(result: CallToolResult, tool: str = "count") -> str:
    """The words of an error result, without the SDK's "Error executing tool" prefix."""
    assert result.is_error
    return _text(result).removeprefix(f"Error executing tool {tool}: ")


def _outcomes(url: str, tool: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    samples = (s for family in text_string_to_metric_families(text) for s in family.samples)
    return {
        s.labels["outcome"]: s.value
        for s in samples
        if s.name == "toolfleet_tool_calls_total" and s.labels.get("tool") == tool
    }


@pytest.mark.parametrize(
    ("fault", "words", "outcome"),
    [
        ("usage", "there is no count below zero", "tool_error"),
        ("unavailable", "counter unavailable: the counting engine is down", "error"),
        ("gone", "the counter stopped; its counts are lost and the next call starts a fresh counter", "tool_error"),
    ],
)
async def test_each_fault_is_an_error_result_in_its_own_words_and_counted_by_its_side(
    url: str, sid: str, fault: str, words: str, outcome: str
) -> None:
    before = _outcomes(url, "count").get(outcome, 0)
    [failed] = await _calls(url, sid, ("count", {"fault": fault}))
    assert _error(failed) == words
    assert _outcomes(url, "count")[outcome] == before + 1


async def test_a_usage_error_leaves_the_session_as_it_was(url: str, sid: str) -> None:
    first, refused, second = await _calls(url, sid, ("count", {}), ("count", {"fault": "usage"}), ("count", {}))
    assert [_text(first), _text(second)] == ["count 1", "count 2"] and refused.is_error
    assert len(COUNTERS[sid]) == 1 and not COUNTERS[sid][0].closed
    assert second.structured_content == {"count": 2}


async def test_a_gone_sandbox_closes_the_session_and_the_next_call_starts_fresh(url: str, sid: str) -> None:
    first, gone, after = await _calls(url, sid, ("count", {}), ("count", {"fault": "gone"}), ("count", {}))
    assert _text(first) == "count 1" and gone.is_error
    old, new = COUNTERS[sid]
    assert old.closed and not new.closed
    assert _text(after) == "count 1"  # a deliberate close: no reset notice, the error already said so


async def test_a_lost_state_is_replaced_and_the_answer_says_it_was_reset(url: str, sid: str) -> None:
    first, lost, after = await _calls(url, sid, ("count", {}), ("count", {"fault": "lost"}), ("count", {}))
    assert _text(first) == "count 1"
    assert not lost.is_error
    assert _text(lost) == (
        "[the counting process died (killed for memory); the session was reset: all counts are lost. "
        "Count again if needed]"
    )
    assert _text(after) == "count 1"
    old, new = COUNTERS[sid]
    assert old.closed and not new.closed


async def test_a_lost_state_whose_replacement_cannot_start_ends_the_session(url: str, sid: str) -> None:
    [first] = await _calls(url, sid, ("count", {}))
    REFUSED.add(sid)
    try:
        [lost] = await _calls(url, sid, ("count", {"fault": "lost"}))
    finally:
        REFUSED.discard(sid)
    assert _error(lost) == (
        "the counting process died (killed for memory) and a new one could not start: no room for another counter"
    )
    [again] = await _calls(url, sid, ("count", {}))
    assert _text(first) == _text(again) == "count 1"
    assert COUNTERS[sid][0].closed


async def test_a_session_that_cannot_start_is_unavailable_not_the_callers_fault(url: str, sid: str) -> None:
    REFUSED.add(sid)
    try:
        [refused] = await _calls(url, sid, ("count", {}))
    finally:
        REFUSED.discard(sid)
    assert _error(refused) == "counter unavailable: no room for another counter"
    assert sid not in COUNTERS


async def test_call_answers_what_the_work_returns_and_a_lost_state_as_an_error(url: str, sid: str) -> None:
    counted, peeked, lost, fresh = await _calls(
        url, sid, ("count", {}), ("peek", {}), ("peek", {"fault": "lost"}), ("peek", {})
    )
    assert _text(counted) == "count 1"
    assert peeked.structured_content == {"count": 1} and not peeked.is_error
    assert _error(lost, "peek").startswith("[the counting process died (killed for memory)")
    assert fresh.structured_content == {"count": 0}


async def test_a_handle_session_gets_its_handle_in_the_answer_and_the_reset_notice_keeps_it(url: str) -> None:
    async with mcp_session(url, "streamable-http") as session:
        minted = await session.call_tool("count", {"session_handle": "new"})
        handle = minted.structured_content["session_handle"]  # type: ignore[index]
        lost = await session.call_tool("count", {"session_handle": handle, "fault": "lost"})
    assert _text(minted).startswith(f"[session handle: {handle} ") and _text(minted).endswith("]\ncount 1")
    assert minted.structured_content == {"count": 1, "session_handle": handle}
    assert lost.structured_content == {"session_handle": handle}
    assert _text(lost).startswith("[the counting process died")


async def test_a_refusal_is_told_once_on_the_calls_own_log_line(
    url: str, sid: str, caplog: pytest.LogCaptureFixture
) -> None:
    with structlog.testing.capture_logs() as events, caplog.at_level(logging.INFO, logger=MCPServer.__module__):
        [refused] = await _calls(url, sid, ("count", {"fault": "usage"}))
    assert refused.is_error
    [line] = [e for e in events if e["event"] == "tool.call"]  # (capture_logs leaves out the bound session id)
    assert line["outcome"] == "tool_error" and line["error"] == "there is no count below zero"
    assert not [r for r in caplog.records if "failed" in r.getMessage()]  # the SDK's own line for it is dropped


async def test_an_argument_the_body_refuses_is_an_error_before_any_session_starts(url: str, sid: str) -> None:
    [refused] = await _calls(url, sid, ("count", {"by": 0}))
    assert _error(refused) == "a count goes up by 1 or more"
    assert sid not in COUNTERS


async def test_a_tool_lists_its_bodys_arguments_and_a_session_handle_and_a_reply_has_no_output_schema(
    url: str,
) -> None:
    async with mcp_session(url, "streamable-http") as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
    count, peek = tools["count"], tools["peek"]
    assert list(count.input_schema["properties"]) == ["fault", "by", "session_handle"]
    assert count.input_schema["properties"]["session_handle"]["x-mcp-header"] == "Session-Handle"
    assert count.description == "Count `by` up in the caller's session, or fail as `fault` says."
    assert count.output_schema is None and peek.output_schema is not None
    assert list(peek.input_schema["properties"]) == ["fault", "session_handle"]
