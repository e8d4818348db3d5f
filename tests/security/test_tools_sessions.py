"""Sessions are bounded per owner: one key's sessions never cost another key its state (issue 32, finding 4).

At `--max-sessions` a tool server used to evict the least recently used idle session whoever owned it (key B's
new sessions wiped key A's python variables), and told A's model it was "reset after N seconds idle". Now an
owner at `--max-sessions-per-owner` evicts only its own oldest idle session, the server's limit refuses a new
session saying the server is full, and the notice says what happened. A real python tool server (local
backend, real bubblewrap) and the real MCP client; the registry's property under concurrent bursts in process.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.python_sandbox.conftest import require_backend, server_args
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service
from toolkit.sessions import SessionRegistry, TooManySessions
from toolkit.wire import OWNER_HEADER, sign_owner

PER_OWNER, MAX = 2, 4


@pytest.fixture(scope="module")
def python() -> Iterator[Service]:
    require_backend("local")
    limits = ["--max-sessions", str(MAX), "--max-sessions-per-owner", str(PER_OWNER), "--drain-s", "0"]
    with running_service(server_args("local", f"pytest-per-owner-{uuid.uuid4().hex[:8]}", *limits)) as server:
        yield server


async def run(server: Service, owner: str | None, session_id: str, code: str) -> tuple[str, bool]:
    """One python call as `owner` (signed; None: no owner header) in `session_id`: its text, and is_error."""
    headers = {"x-session-id": session_id} | ({OWNER_HEADER: sign_owner(owner)} if owner else {})
    async with mcp_session(server.url, "streamable-http", headers) as session:
        result = await session.call_tool("python", {"code": code})
    return result.content[0].text, bool(result.is_error)


async def test_one_owners_burst_evicts_only_its_own_sessions_and_a_full_server_refuses(python: Service) -> None:
    tag = uuid.uuid4().hex[:6]
    a, b = [f"a-{tag}-{i}" for i in range(2)], [f"b-{tag}-{i}" for i in range(3)]
    for sid in a:
        assert await run(python, "key_a", sid, f"mine = {sid!r}") == ("[no output]", False)
    for sid in b:  # the third is over B's limit: B's own oldest goes, none of A's
        assert await run(python, "key_b", sid, f"mine = {sid!r}") == ("[no output]", False)
    for sid in a:
        assert await run(python, "key_a", sid, "mine") == (repr(sid), False)
    text, failed = await run(python, "key_b", b[0], "'mine' in globals()")
    assert not failed and text.startswith("[this session's state was evicted (this owner's session limit of 2")
    assert text.endswith("False"), text
    # A holds 2, B holds 2: the server is full; a third owner, or a caller without a valid owner, is refused
    for owner in ("key_c", None):
        text, failed = await run(python, owner, f"c-{tag}", "1")
        assert failed and "this tool server is full: it holds its limit of 4 sessions" in text, text
    forged = {"x-session-id": f"f-{tag}", OWNER_HEADER: "key_a." + "0" * 32}  # A's name, not A's signature
    async with mcp_session(python.url, "streamable-http", forged) as session:
        refused = await session.call_tool("python", {"code": "1"})
    assert refused.is_error and "is full" in refused.content[0].text
    for sid in a:
        assert await run(python, "key_a", sid, "mine") == (repr(sid), False)


Acting = contextvars.ContextVar[str]("acting")


class State:
    def __init__(self, owner: str, closed_by: list[tuple[str, str]]) -> None:
        self.owner, self._closed_by = owner, closed_by

    async def aclose(self) -> None:
        self._closed_by.append((self.owner, Acting.get()))


BURSTS = st.lists(st.tuples(st.sampled_from(["A", "B"]), st.integers(0, 5)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(bursts=BURSTS, per_owner=st.integers(1, 3), spare=st.integers(-1, 2))
def test_concurrent_bursts_of_two_owners_never_evict_the_other_owners_session(
    bursts: list[tuple[str, int]], per_owner: int, spare: int
) -> None:
    closed_by: list[tuple[str, str]] = []
    limit = max(2 * per_owner + spare, 1)

    async def make(key: str) -> State:
        await anyio.lowlevel.checkpoint()  # creations of several keys overlap
        return State(Acting.get(), closed_by)

    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=limit, max_per_owner=per_owner)

    async def burst(owner: str) -> None:
        Acting.set(owner)
        for who, n in bursts:
            if who != owner:
                continue
            key = f"{owner}{n}"
            try:
                await registry.acquire(key, owner=owner)
            except TooManySessions:
                continue
            await anyio.lowlevel.checkpoint()  # busy across a turn of the other owner's burst
            registry.release(key)

    async def both() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(burst, "A")
            tg.start_soon(burst, "B")

    anyio.run(both)
    assert all(owner == acting for owner, acting in closed_by), closed_by
    assert len(registry) <= limit
