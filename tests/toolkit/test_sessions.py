"""The session registry: one state per key under concurrency, limits, idle reaping, close-all."""

from __future__ import annotations

import anyio
import pytest

from toolkit.drain import Drain
from toolkit.sessions import SessionRegistry, TooManySessions


class State:
    made = 0

    def __init__(self, key: str) -> None:
        self.key = key
        self.closed = False
        State.made += 1

    async def aclose(self) -> None:
        self.closed = True


async def make(key: str) -> State:
    await anyio.sleep(0.01)  # creation takes time, so concurrent first calls overlap
    return State(key)


async def test_concurrent_first_calls_of_one_key_share_one_state() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=10)
    got: list[State] = []

    async def acquire() -> None:
        got.append(await registry.acquire("k"))
        registry.release("k")

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(acquire)
    assert len({id(s) for s in got}) == 1 and len(registry) == 1


async def test_the_session_limit_refuses_new_keys_only_while_every_session_is_busy() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=1)
    await registry.acquire("a")  # busy: in a call
    with pytest.raises(TooManySessions, match="limit of 1 sessions on this server, all of them busy"):
        await registry.acquire("b")
    assert (await registry.acquire("a")).key == "a" and "b" not in registry


async def test_keys_refused_at_a_full_server_leave_nothing_behind() -> None:
    """A caller naming ever new keys at a full server must not grow the registry (a lock per key was kept)."""
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=1)
    await registry.acquire("held", owner="a")
    for n in range(50):
        with pytest.raises(TooManySessions, match="this tool server is full"):
            await registry.acquire(f"refused-{n}", owner="b")
    assert list(registry._locks) == ["held"]


async def test_sessions_still_being_created_count_against_the_limit() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=2)
    outcomes: list[str] = []

    async def first_call(key: str) -> None:
        try:
            await registry.acquire(key)
        except TooManySessions:
            outcomes.append("refused")
        else:
            outcomes.append("held")

    async with anyio.create_task_group() as tg:
        for key in ("a", "b", "c"):
            tg.start_soon(first_call, key)  # all three ask before any state is made
    assert sorted(outcomes) == ["held", "held", "refused"] and len(registry) == 2


async def test_at_its_limit_an_owners_new_session_evicts_its_least_recently_used_idle_one() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=2)
    states = {}
    for key in ("old", "recent"):
        states[key] = await registry.acquire(key)
        registry.release(key)
        await anyio.sleep(0.01)
    await registry.acquire("new")
    assert states["old"].closed and not states["recent"].closed
    assert "old" not in registry and "recent" in registry and "new" in registry
    registry.release("new")
    # The evicted conversation comes back to a fresh state and hears of it once, as after the idle TTL;
    # making room for it evicts the next least recently used ("recent").
    assert (await registry.acquire("old")) is not states["old"]
    assert registry.take_reset("old") is not None and registry.take_reset("old") is None
    assert states["recent"].closed and "new" in registry


async def test_idle_sessions_are_reaped_but_busy_ones_are_kept() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=0.05, max_sessions=10)
    idle = await registry.acquire("idle")
    registry.release("idle")
    busy = await registry.acquire("busy")
    await anyio.sleep(0.1)
    assert await registry.reap_idle() == 1
    assert idle.closed and not busy.closed and "busy" in registry and "idle" not in registry


async def test_close_all_and_replace_close_every_state() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=10)
    old = await registry.acquire("a")
    new = State("a")
    await registry.replace("a", new)
    assert old.closed and (await registry.acquire("a")) is new
    await registry.close_all()
    assert new.closed and len(registry) == 0
    assert await registry.close("a") is False


async def test_a_reaped_key_hears_once_how_long_it_was_idle_and_a_cleaned_up_key_never_does() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=0.05, max_sessions=10)
    for key in ("reaped", "cleaned"):
        await registry.acquire(key)
        registry.release(key)
        assert registry.take_reset(key) is None  # a first state replaces nothing
    await anyio.sleep(0.1)
    assert await registry.reap_idle() == 2
    await registry.acquire("cleaned")
    await registry.close("cleaned")  # a deliberate end forgets the reap
    await registry.acquire("reaped")
    await registry.acquire("cleaned")
    assert registry.take_reset("reaped") == "reaped after 0 seconds idle"
    assert registry.take_reset("reaped") is None  # said once
    assert registry.take_reset("cleaned") is None


async def test_the_memory_of_reaped_keys_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("toolkit.sessions.REAPED_MEMORY", 2)
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=0, max_sessions=10)
    for key in ("a", "b", "c"):
        await registry.acquire(key)
        registry.release(key)
        await anyio.sleep(0.01)
        await registry.reap_idle()
    for key in ("a", "b", "c"):
        await registry.acquire(key)
    assert [registry.take_reset(k) is not None for k in ("a", "b", "c")] == [False, True, True]


async def test_a_key_a_drained_replica_held_hears_once_that_it_was_lost_with_its_replica() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=10)
    registry.moved_here("moved")
    await registry.acquire("moved")
    assert registry.take_reset("moved") == "lost with its replica (the server that held it shut down)"
    assert registry.take_reset("moved") is None
    await registry.acquire("fresh")
    assert registry.take_reset("fresh") is None
    await registry.acquire("ended")
    registry.moved_here("ended")  # a key held here is not a move: its state is here
    await registry.close("ended")
    await registry.acquire("ended")
    assert registry.take_reset("ended") is None


class Saver:
    """A keeper in memory whose states named `big-*` cannot be saved."""

    def __init__(self) -> None:
        self.saved: list[str] = []

    async def keep(self, key: str, owner: str, state: object, trigger: str) -> str | None:
        if key.startswith("big-"):
            return "larger than the cap"
        self.saved.append(key)
        return None

    async def bring_back(self, key: str, owner: str, state: object) -> tuple[str | None, str | None]:
        return None, None


async def test_a_drain_hands_idle_sessions_over_at_once_busy_ones_as_their_call_ends_and_keeps_unsaved_ones() -> None:
    registry: SessionRegistry[State] = SessionRegistry(make, ttl_s=60, max_sessions=10)
    registry.keeper = saver = Saver()
    states = {key: await registry.acquire(key) for key in ("idle", "busy", "big-one")}
    registry.release("idle")
    registry.release("big-one")
    drain = Drain(registry.__contains__, registry.__len__, lambda: 0, hand_over=registry.hand_over, instance="i")
    closed = anyio.Event()

    def changed(count: int) -> None:
        drain.changed()
        closed.set()

    async def until_gone(key: str) -> None:
        nonlocal closed
        while key in registry:
            closed = anyio.Event()
            await closed.wait()

    registry.on_change = changed
    with anyio.fail_after(30):  # a drain that never hands a session over fails here rather than hanging
        async with anyio.create_task_group() as group:
            group.start_soon(drain, 5.0)
            await until_gone("idle")
            assert saver.saved == ["idle"] and states["idle"].closed and "busy" in registry
            registry.release("busy")
            drain.changed()  # as the front does when a call ends
            await until_gone("busy")
            group.cancel_scope.cancel()  # it waits out its grace period once it handed sessions over
    assert saver.saved == ["idle", "busy"] and "big-one" in registry and not states["big-one"].closed
    assert registry.gone_reason("idle") == "lost with its replica (the server that held it shut down)"


def test_the_default_idle_order_lets_the_conversations_owner_clean_up_first() -> None:
    from gateway.config import SessionConfig
    from orchestrator.settings import OrchestratorSettings
    from toolkit.settings import ToolServerSettings

    order = [
        OrchestratorSettings.model_fields["session_idle_s"].default,
        SessionConfig.model_fields["idle_s"].default,
        ToolServerSettings.model_fields["session_ttl_s"].default,
    ]
    assert order == sorted(order) and len(set(order)) == 3, order
