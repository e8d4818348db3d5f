"""Which session a call runs in, and what its caller is told of it.

A call names its session by `x-session-id`, by a session handle (for clients that carry no session), or by
its 2025-era MCP session; a call naming none runs in a session of its own. Only a new handle may start a
session, or a handle this replica does not hold whose snapshot it finds (its replica drained or died: handles
are fleet-signed, so any replica may take one up). The answer's first lines say when the session's state went
since the last call, or was restored, or which handle this call minted.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from toolkit import handles
from toolkit.handles import BadHandle, Handles
from toolkit.sessions import LOST_WITH_REPLICA, S, SessionGone, SessionRegistry, TooManySessions, idle_words
from toolkit.snapshots.keeper import SnapshotKeeper
from toolkit.wire import OWNER_HEADER, RESET_HEADER, SESSION_HEADER, read_owner

_SESSION_ID = re.compile(r"^[\x21-\x7e]{1,256}$")
MOVED_WORDS = {"drained": LOST_WITH_REPLICA, "lost": "lost with its replica (the server that held it went away)"}
"""Why a session the gateway moved here (its `RESET_HEADER` value) left its old replica, as its next call hears
it when no snapshot brings its state back."""


def headers(ctx: Context) -> Mapping[str, str]:
    """The HTTP headers of the request that carries the call (none over stdio)."""
    return getattr(ctx.request_context.request, "headers", None) or {}


class BadSessionId(ToolError):
    """The caller's x-session-id header is not a usable session name."""


def session_key(ctx: Context) -> str | None:
    """The session the call's transport names: `x-session-id` when sent, else the 2025-era MCP session
    (streamable or SSE); None for a 2026-07-28 request, which belongs to no session."""
    sent = headers(ctx)
    if (sid := sent.get(SESSION_HEADER)) is not None:
        if not _SESSION_ID.match(sid):
            raise BadSessionId("x-session-id must be 1-256 visible ASCII characters")
        return sid
    if sid := sent.get("mcp-session-id"):
        return f"mcp-{sid}"
    query = getattr(ctx.request_context.request, "query_params", None) or {}
    if sid := query.get("session_id"):
        return f"sse-{sid}"
    return None


@dataclass(frozen=True, slots=True)
class Identity:
    """Which session one call runs in."""

    key: str
    owner: str
    """Whom the call is for (the owner header, when its signature holds; else anonymous): the session's
    owner when this call starts it, whose session limit it counts against."""
    handle: bool = False
    """Named by a session handle (answered back in `structuredContent`)."""
    minted: bool = False
    """The handle was minted by this call: its text says so."""
    once: bool = False
    """A call with no session: its state ends with the call."""


class Callers(Generic[S]):
    """The calls' sessions over the server's registry: who a call is, its state, and its notice and handle."""

    def __init__(
        self, sessions: SessionRegistry[S], names: Handles, ttl_s: float, keeper: SnapshotKeeper | None = None
    ) -> None:
        self.sessions = sessions
        self.handles = names
        self._ttl_s = ttl_s
        self._keeper = keeper
        self._minted: set[str] = set()

    def moved(self, key: str, why: str) -> None:
        """The gateway moved `key` here from a replica that went away (`RESET_HEADER`'s value `why`): noted, so
        that a fresh state is never mistaken for the old one. The front notes an x-session-id as the request
        comes (it may be any message); a handle, which only a call names, is noted here as the call is told."""
        self.sessions.moved_here(key, MOVED_WORDS.get(why, LOST_WITH_REPLICA))

    def identify(self, ctx: Context, handle: str | None) -> Identity:
        """The session a call runs in (see `_identify`)."""
        who = self._identify(ctx, handle)
        if who.handle and not who.minted and (why := headers(ctx).get(RESET_HEADER)) is not None:
            self.moved(who.key, why)
        return who

    def _identify(self, ctx: Context, handle: str | None) -> Identity:
        """`x-session-id`, else the call's handle, else its 2025-era MCP session; a call with none of them gets a
        session of its own that ends with it (see the README's "MCP protocol eras")."""
        key = session_key(ctx)
        owner = read_owner(headers(ctx).get(OWNER_HEADER))
        if handle is None:
            return Identity(key, owner) if key is not None else Identity(f"once-{uuid.uuid4().hex}", owner, once=True)
        if headers(ctx).get(SESSION_HEADER) is not None:
            raise BadHandle("this call names its session by x-session-id; session_handle is for clients without one")
        if handle == handles.NEW:
            return Identity(self.handles.mint(), owner, handle=True, minted=True)
        self.handles.check(handle)
        return Identity(handle, owner, handle=True)

    async def acquire(self, who: Identity, factory: Callable[[str], Awaitable[S]]) -> S:
        """The state of `who`; a handle creates it only when new, or when it is saved (restored from there)."""
        try:
            state = await self.sessions.acquire(
                who.key,
                owner=who.owner,
                create=who.minted or not who.handle or await self._saved(who),
                restore=not (who.once or who.minted),
                factory=factory,
            )
        except TooManySessions as exc:
            raise ToolError(str(exc)) from exc
        except SessionGone as exc:
            gone = self.sessions.gone_reason(who.key)
            why = f"was {gone}" if gone is not None else "was ended or expired"
            raise BadHandle(
                f"session handle {who.key!r} {why} (an idle handle lives {self.idle_lifetime}); its state is gone: "
                f"pass {handles.NEW!r} to start a new session"
            ) from exc
        if who.minted:
            self._minted.add(who.key)
        return state

    async def _saved(self, who: Identity) -> bool:
        """Whether a handle this replica does not hold has a snapshot of its owner's to be restored from."""
        if self._keeper is None or who.key in self.sessions:
            return False
        return await self._keeper.has(who.key, who.owner)

    @property
    def idle_lifetime(self) -> str:
        return idle_words(self._ttl_s)

    def notice(self, key: str) -> str:
        """The lines the model reads first: that this session's state went since its last call, and why (so a
        fresh state is never mistaken for the old one), or the handle this call minted."""
        text = self.sessions.take_restored(key) or ""
        if (reason := self.sessions.take_reset(key)) is not None:
            text = f"[this session's state was {reason}: everything earlier calls made in it is gone]\n"
        if (unsaved := self.sessions.take_unsaved(key)) is not None:
            text += (
                f"[this session's state could not be saved ({unsaved}): it keeps running here, but what changed "
                "since its last snapshot is lost if this server stops or fails]\n"
            )
        if key in self._minted:
            text += (
                f"[session handle: {key} - pass it as {handles.ARGUMENT} to keep this session's state; "
                f"cleanup_session with it ends the session, and it expires after {self.idle_lifetime} idle]\n"
            )
        return text

    def structured(self, key: str, data: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """A call's `structuredContent`, with the session's handle when a handle names it."""
        if not self.handles.owns(key):
            return data
        return {**(data or {}), handles.ARGUMENT: key}

    async def release(self, who: Identity, *, changed: bool = True) -> None:
        """The call is over: its session is free for the next call (saved in the background if the call `changed`
        it); a session of its own is closed."""
        self.sessions.release(who.key, changed=changed and not who.once)
        self._minted.discard(who.key)
        if who.once:
            await self.sessions.close(who.key)
