"""Namespaces and session routing: which replica a client message goes to, and the pin table's rules.

A session is keyed (`keys.SessionKey`) by the client's `x-session-id` when it sends one, else by its
gateway session id, else by the session handle its call names (2026-07-28 clients; pinned when the
call that minted it is answered, and found in the pin store by every gateway replica sharing it).
New sessions go to the healthy replica that is not draining and has the most room (the sessions it said
it can still open), else the fewest pinned sessions; a pinned session stays on its replica; when that
replica goes down its sessions are marked lost and their calls get an error naming the session, never a
silent fresh state. A replica that drained (see `toolkit.drain`) went away on purpose: the next call of
a session it held is placed afresh, and the new replica is told (`Toolfleet-Session-Reset`), so it restores
the session's snapshot or says the state was reset. A session handle is fleet-signed, so one whose replica
went away for any reason (drained, killed) is placed afresh too: the new replica restores it from its
snapshot, or answers that its state was lost with its replica. So is an x-session-id session in a namespace
whose replicas share a snapshot store (`restore_lost`): a killed replica's sessions come back from their last
background snapshot instead of being refused as lost.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.approvals import ToolGuard
from gateway.config import GatewayConfig, NamespaceConfig
from gateway.envelope import NEW_HANDLE, request_state, session_handle
from gateway.errors import (
    SessionLost,
    TaskLost,
    Unavailable,
    UnknownHandle,
    UnknownNamespace,
    UnknownSession,
)
from gateway.headers import HeaderRules
from gateway.keys import SessionKey
from gateway.messages import SAFE_METHODS, tool_name
from gateway.store import Pin, SessionRecord, Store
from gateway.upstream import Replica
from toolkit.handles import misdirected
from toolkit.wire import task_instance

log = structlog.get_logger(__name__)

TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
"""MCP Tasks requests (`toolkit.tasks`): routed by their `params.taskId`."""


class Namespace:
    """One tool namespace: its replicas, header rules, tool guard and last known discovery answers."""

    def __init__(self, name: str, cfg: NamespaceConfig, gw: GatewayConfig, store: Store) -> None:
        self.name = name
        self.cfg = cfg
        self.rules = HeaderRules(cfg.headers)
        self.guard = ToolGuard(name, cfg.tool_pinning, store)
        self._health = gw.health
        self.replicas: dict[str, Replica] = {url: self._replica(url) for url in cfg.replicas}
        """By URL; a discovered namespace's change as its name resolves (see `adopt`)."""
        self.initialize_result: dict[str, Any] | None = None
        self.tools: list[Any] | None = None
        self.saved_discovery: dict[str, Any] | None = None
        """The discovery answers as last written to the store (see `Gateway.save_discovery`)."""
        self.resolved_at = -float("inf")
        """When the namespace's discovery name was last resolved (anyio clock)."""
        self._rr = itertools.count()

    def _replica(self, url: str, *, healthy: bool = True) -> Replica:
        h = self._health
        return Replica(self.name, url, failures_to_open=h.failures_to_open, open_s=h.open_s, healthy=healthy)

    def adopt(self, urls: set[str]) -> tuple[list[Replica], list[Replica]]:
        """Make `urls` the replica set; returns (added, removed). Added replicas start unproven. A replica
        that vanished from the name while it is up is being stopped (a swarm takes a task out of DNS as it
        stops it): it stays, draining, for the sessions it holds, and goes when it is down (`Gateway.watch`)."""
        removed = [r for url, r in self.replicas.items() if url not in urls and not (r.available or r.vanished)]
        for url, replica in self.replicas.items():
            if url not in urls and replica.available and not replica.vanished:
                replica.vanished = True
                log.info("replica.vanished", namespace=self.name, replica=url)
            elif url in urls and replica.vanished:
                replica.vanished = False
        added = [self._replica(url, healthy=False) for url in sorted(urls) if url not in self.replicas]
        for replica in removed:
            del self.replicas[replica.url]
        self.replicas.update({r.url: r for r in added})
        return added, removed

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.available]

    def pick(self, counts: dict[str, int], exclude: frozenset[str] = frozenset()) -> Replica:
        """The replica with the most room among those taking new sessions (when every one of them said how
        much it has), else with the fewest pinned sessions; round robin among equals. The chosen one's room
        is counted down at once, so a burst of new sessions between two answers spreads too."""
        candidates = [r for r in self.replicas.values() if r.accepting and r.url not in exclude]
        if not candidates:
            raise Unavailable(f"namespace {self.name!r} has no healthy replica that takes new sessions")
        told = all(r.room is not None for r in candidates)

        def score(r: Replica) -> int:
            return -(r.room or 0) if told else counts.get(r.url, 0)

        low = min(map(score, candidates))
        best = [r for r in candidates if score(r) == low]
        chosen = best[next(self._rr) % len(best)]
        if chosen.room:
            chosen.room -= 1
        return chosen


@dataclass(slots=True)
class Target:
    """Where one client message goes: a replica, always."""

    ns: Namespace
    replica: Replica
    key: SessionKey | None = None
    sid: str | None = None
    upstream_sid: str | None = None
    fresh: bool = False
    """The pin was made for this message, so a safe method may be retried elsewhere."""
    moved: str | None = None
    """Why the session's replica went (`DRAINED` or `LOST`): this message places it afresh, and the new replica
    hears of it."""
    reopen: bool = False
    """The client's MCP session moved to this replica with its key: its upstream session must be opened here
    before the message goes."""


@dataclass(slots=True)
class Degraded:
    """A message no replica can take (none was available, or its MCP session began without one): discovery is
    answered from the namespace's last known answers, anything else gets a clear error."""

    ns: Namespace
    key: SessionKey | None = None
    sid: str | None = None
    upstream_sid: str | None = None
    fresh: bool = False


DRAINED = "drained"
"""A session's replica drained (went away on purpose), as the new replica hears it."""
LOST = "lost"
"""A session's replica went away without a drain (killed, a lost node), as the new replica hears it."""


def new_session_id() -> str:
    return uuid.uuid4().hex


async def _no_revive(ns: Namespace) -> None:
    return None


class Router:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.namespaces: dict[str, Namespace] = {}
        self.revive: Callable[[Namespace], Awaitable[None]] = _no_revive
        """Probe a namespace's unavailable replicas now (the gateway sets it; see `discovery.probe_now`)."""

    async def pick(self, ns: Namespace, exclude: frozenset[str] = frozenset()) -> Replica:
        """A replica for a new session. When none is available the replicas that are down are probed once
        first, so a gateway that started before its tools does not refuse calls until its circuits close."""
        try:
            return ns.pick(await self.store.counts(ns.name), exclude)
        except Unavailable:
            await self.revive(ns)
            return ns.pick(await self.store.counts(ns.name), exclude)

    def namespace(self, name: str) -> Namespace:
        ns = self.namespaces.get(name)
        if ns is None:
            raise UnknownNamespace(f"unknown namespace {name!r}")
        return ns

    async def resolve(self, ns: Namespace, sid: str | None, xsid: str | None, msg: dict[str, Any]) -> Target | Degraded:
        """The target of `msg` in MCP session `sid` (gateway id) or, without one, of session key `xsid`; a
        sessionless `tasks/*` request goes to the replica that owns its task."""
        if sid is None and msg.get("method") in TASK_METHODS:
            return await self._by_task(ns, msg)
        if sid is not None:
            rec = await self.store.get_session(sid)
            if rec is None or rec.namespace != ns.name:
                raise UnknownSession(f"unknown MCP session {sid!r}: initialize a new one")
            if rec.replica is None:
                return Degraded(ns, rec.key, sid)
            pin = await self.store.get_pin(ns.name, rec.key)
            if self._follows_key(ns, rec, pin):
                target = await self._by_key(ns, rec.key, msg, pin)
                target.sid, target.reopen = sid, rec.upstream_sid is not None
                return target
            if pin is None:  # cleaned up while its MCP session lives on: pin it again where it was
                pin = await self.store.claim_pin(ns.name, rec.key, rec.replica)
            return Target(ns, await self._pinned(ns, rec.key, pin, msg), rec.key, sid, rec.upstream_sid)
        key = SessionKey.header(xsid)
        handle = session_handle(msg)
        if key is None and handle is not None and handle != NEW_HANDLE:
            return await self._by_handle(ns, handle, msg)
        if key is None and (state := request_state(msg)) is not None:
            retry = SessionKey.retry(state)
            if (pin := await self.store.get_pin(ns.name, retry)) is not None:
                return Target(ns, await self._pinned(ns, retry, pin, msg), retry)
        if key is None:
            return Target(ns, await self.pick(ns), fresh=True)
        return await self._by_key(ns, key, msg, await self.store.get_pin(ns.name, key))

    def _follows_key(self, ns: Namespace, rec: SessionRecord, pin: Pin | None) -> bool:
        """Whether an MCP session named by x-session-id goes where its key is now placed, not to the replica it
        opened on: that replica drained (the key is placed again), or another MCP session moved the key."""
        if not rec.key.by_header or pin is None:
            return False
        return pin.replica != rec.replica or self._why_moved(ns, pin) is not None

    async def _by_key(self, ns: Namespace, key: SessionKey, msg: dict[str, Any], pin: Pin | None) -> Target:
        """The target of session key `key` (pinned by `pin`, as read): where it is pinned, or placed afresh when
        it is new or its replica went away and it may move (`_why_moved`)."""
        moved = None if pin is None else self._why_moved(ns, pin)
        if pin is not None and moved is None:
            return Target(ns, await self._pinned(ns, key, pin, msg), key)
        if pin is not None:  # its replica went away: place the session again
            await self.store.drop_pin(ns.name, key)
            log.info("session.moved", namespace=ns.name, session_id=key.id, gone=pin.replica, why=moved)
        chosen = await self.pick(ns)
        pin = await self.store.claim_pin(ns.name, key, chosen.url)
        fresh = pin.replica == chosen.url
        return Target(ns, await self._pinned(ns, key, pin, msg), key, fresh=fresh, moved=moved)

    def _why_moved(self, ns: Namespace, pin: Pin) -> str | None:
        """Why a pinned x-session-id session leaves its replica: DRAINED, LOST (gone undrained, in a namespace
        with `restore_lost`), or None: it stays (and is refused as lost when its replica is gone)."""
        if pin.drained or self._drained(ns, pin.replica):
            return DRAINED
        replica = ns.replicas.get(pin.replica)
        gone = pin.lost or replica is None or not replica.healthy
        return LOST if gone and ns.cfg.restore_lost else None

    @staticmethod
    def _drained(ns: Namespace, url: str) -> bool:
        """The replica drained and is gone, though its sessions may not be marked yet."""
        replica = ns.replicas.get(url)
        return replica is not None and replica.said_draining and not replica.healthy

    async def _by_task(self, ns: Namespace, msg: dict[str, Any]) -> Target:
        """The replica whose instance id the task id carries (learnt from its answers, probes included). A
        request naming no such id goes to any replica, which refuses it as the extension says (an undeclared
        extension, or the one refusal of an unknown task); the replica checks the id's seal, so another owner's
        id is refused there in the same words."""
        params = msg.get("params")
        task_id = params.get("taskId") if isinstance(params, dict) else None
        instance = task_instance(task_id)
        if instance is None:
            return Target(ns, await self.pick(ns), fresh=True)
        replica = next((r for r in ns.replicas.values() if r.instance == instance), None)
        if replica is None or not replica.healthy:
            raise TaskLost(
                f"task {task_id!r} was lost: the replica of {ns.name!r} that ran it is gone, and its work and "
                "result went with it",
                data={"task": task_id, "namespace": ns.name},
            )
        return Target(ns, replica)

    async def _by_handle(self, ns: Namespace, handle: str, msg: dict[str, Any]) -> Target:
        """The target of a call naming a session handle: the replica that minted it, from the pin store. A
        handle that cannot be routed is the call's argument error (the tool's error result), in the words the
        tool server would use."""
        if (why := misdirected(handle, ns.name)) is not None:
            raise UnknownHandle(why, data={"session": handle[:80], "namespace": ns.name})
        key = SessionKey.handle(handle)
        pin = await self.store.get_pin(ns.name, key)
        if pin is None:
            raise UnknownHandle(
                f"unknown session handle {handle!r} for {ns.name!r}: it was never issued here, or it ended "
                f"(cleanup_session) or expired idle; pass {NEW_HANDLE!r} to start a session",
                data={"session": handle, "namespace": ns.name},
            )
        replica = ns.replicas.get(pin.replica)
        if pin.lost or replica is None or not replica.healthy:
            return await self._move_handle(ns, key, pin, msg)
        return Target(ns, await self._pinned(ns, key, pin, msg), key)

    async def _move_handle(self, ns: Namespace, key: SessionKey, pin: Pin, msg: dict[str, Any]) -> Target:
        """Place a handle whose replica went away on another: handles are fleet-signed, so the new replica takes
        it up from its snapshot, or says its state was lost with its replica (told why by `moved`)."""
        gone = ns.replicas.get(pin.replica)
        drained = pin.drained or (gone is not None and gone.said_draining)
        if not pin.lost:
            await self.store.mark_lost(ns.name, pin.replica, drained=drained)
        await self.store.drop_pin(ns.name, key)
        log.info("session.moved", namespace=ns.name, session_id=key.id, gone=pin.replica, drained=drained)
        chosen = await self.pick(ns)
        pin = await self.store.claim_pin(ns.name, key, chosen.url)
        fresh, moved = pin.replica == chosen.url, DRAINED if drained else LOST
        return Target(ns, await self._pinned(ns, key, pin, msg), key, fresh=fresh, moved=moved)

    async def pin(self, target: Target, key: SessionKey) -> None:
        """Pin a handle the target's replica minted, or the state of its `input_required` answer, to it."""
        if key.kind != "handle" or key.id.partition(".")[0] == target.ns.name:
            await self.store.claim_pin(target.ns.name, key, target.replica.url)
            log.info("session.pinned", namespace=target.ns.name, session_id=key.id, replica=target.replica.url)

    async def _pinned(self, ns: Namespace, key: SessionKey, pin: Pin, msg: dict[str, Any]) -> Replica:
        """The replica holding `key` by `pin`, as the caller read it (once per message). A lost session still
        answers discovery (from a healthy replica); anything else is refused naming the session, and
        `cleanup_session` drops the pin so the caller can start over."""
        replica = ns.replicas.get(pin.replica)
        if pin.lost or replica is None or not replica.healthy:
            if not pin.lost:
                await self.store.mark_lost(ns.name, pin.replica, drained=replica is not None and replica.said_draining)
            if msg.get("method") in SAFE_METHODS:
                return await self.pick(ns)
            if tool_name(msg) == "cleanup_session":
                await self.store.drop_pin(ns.name, key)
            raise SessionLost(
                f"session {key.id!r} was lost: its replica of {ns.name!r} went away",
                data={"session": key.id, "namespace": ns.name},
            )
        await self.store.touch(ns.name, key)
        return replica

    async def repick(self, target: Target, failed: Replica, *, moved: str | None = None) -> Target:
        """A fresh target for a message whose first replica failed before answering (`moved`: why it went, and
        the session it held is taken up, from its snapshot or afresh, on the new one)."""
        ns = target.ns
        chosen = await self.pick(ns, exclude=frozenset({failed.url}))
        if target.key is not None:
            await self.store.drop_pin(ns.name, target.key)
            await self.store.claim_pin(ns.name, target.key, chosen.url)
        reopen = target.reopen or (moved is not None and target.upstream_sid is not None)
        return Target(ns, chosen, target.key, target.sid, target.upstream_sid, fresh=True, moved=moved, reopen=reopen)

    async def open_session(self, target: Target | Degraded, upstream_sid: str | None, *, sid: str | None = None) -> str:
        """Record a new MCP session after the upstream accepted `initialize` (or, degraded, after the gateway
        answered it); returns the gateway's session id."""
        sid = sid or new_session_id()
        key = target.key or SessionKey.session(sid)
        replica = target.replica.url if isinstance(target, Target) else None
        if target.key is None and replica is not None:
            await self.store.claim_pin(target.ns.name, key, replica)
        await self.store.put_session(sid, SessionRecord(target.ns.name, key, replica, upstream_sid))
        target.key, target.sid, target.upstream_sid = key, sid, upstream_sid
        return sid

    async def close_session(self, sid: str) -> SessionRecord | None:
        """Forget an MCP session; a pin keyed by the session itself goes with it."""
        rec = await self.store.get_session(sid)
        await self.store.drop_session(sid)
        if rec is not None and not rec.key.by_header:
            await self.store.drop_pin(rec.namespace, rec.key)
        return rec

    async def drop_pin(self, ns: Namespace, key: SessionKey | None) -> None:
        if key is not None:
            await self.store.drop_pin(ns.name, key)
            log.info("session.unpinned", namespace=ns.name, session_id=key.id)

    async def replica_down(self, replica: Replica) -> None:
        """Its sessions are lost; when it said it drained, the next call of each is placed again (see `resolve`);
        a replica that only left discovery may have been killed (a lost node): its sessions are lost."""
        lost = await self.store.mark_lost(replica.namespace, replica.url, drained=replica.said_draining)
        if lost:
            event = "sessions.drained" if replica.said_draining else "sessions.lost"
            log.warning(event, namespace=replica.namespace, replica=replica.url, sessions=lost)
