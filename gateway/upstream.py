"""Upstream replicas: their health (active probes, passive failures, a circuit breaker) and the HTTP client.

Transport exceptions are translated here, where they enter, into `Unavailable`,
`UpstreamTimeout` or `BadUpstream`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator

import structlog

from gateway.config import PoolConfig
from gateway.errors import BadUpstream, Draining, InvalidRequest, Unanswered, Unavailable, Unreached, UpstreamTimeout
from toolkit.mcpwire.http import ClosedUnanswered, ConnectFailed, InvalidHeader, Pool, ProtocolError, Response, Timeouts
from toolkit.mcpwire.sse import SseOverflow
from toolkit.wire import DRAINING_HEADER, INSTANCE_HEADER, ROOM_HEADER

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUTS = Timeouts(connect=2.0, read=600.0)


class Replica:
    """One upstream MCP endpoint; `available` is False while its circuit is open or a probe failed."""

    def __init__(self, namespace: str, url: str, *, failures_to_open: int, open_s: float, healthy: bool = True) -> None:
        self.namespace = namespace
        self.url = url
        self.healthy = healthy
        """Listed replicas start trusted; discovered ones wait for their first probe (the name may resolve
        before the server listens)."""
        self.failures = 0
        self.open_until = 0.0
        self._failures_to_open = failures_to_open
        self._open_s = open_s
        self.said_draining = False
        """Its last answer said it drains (SIGTERM): once it stops, its sessions move (see `routing`)."""
        self.vanished = False
        """Its address left the discovered name while it was up (see `Namespace.adopt`)."""
        self.instance: str | None = None
        """The instance id its MCP task ids carry (its answers' `Toolfleet-Instance`); None: not told yet."""
        self.room: int | None = None
        """How many more sessions it said it can open (its last answer's `Toolfleet-Room`); None: not told."""
        self.answered_at = -float("inf")
        """When it last answered (monotonic clock): a probe that fails while calls are answered judges no one."""
        self.on_down: Callable[[Replica], None] = lambda r: None
        self.on_state: Callable[[Replica], None] = lambda r: None

    @property
    def available(self) -> bool:
        return self.healthy and time.monotonic() >= self.open_until

    @property
    def draining(self) -> bool:
        """It serves the sessions it holds but gets no new one: it said it drains, or it left discovery."""
        return self.said_draining or self.vanished

    @property
    def accepting(self) -> bool:
        """Available for a new session: up and not draining."""
        return self.available and not self.draining

    def heard(self, response: Response) -> None:
        """Take what the replica's answer says about itself (see `toolkit.drain`)."""
        draining = response.headers.get(DRAINING_HEADER) is not None
        if draining and not self.said_draining:
            log.info("replica.draining", namespace=self.namespace, replica=self.url)
        self.said_draining = draining
        room = response.headers.get(ROOM_HEADER)
        self.room = int(room) if room is not None and room.isdigit() else None
        self.instance = response.headers.get(INSTANCE_HEADER) or self.instance

    def answered_since(self, when: float) -> bool:
        """It answered a call after `when` (monotonic): it is alive, however slow a probe found it."""
        return self.answered_at >= when

    def record_success(self) -> None:
        self.answered_at = time.monotonic()
        self.failures = 0
        if not self.healthy:
            self.healthy = True
            self.open_until = 0.0
            log.info("replica.up", namespace=self.namespace, replica=self.url)
            self.on_state(self)

    def record_failure(self, *, decisive: bool = False) -> None:
        """A failed call or probe; `decisive` (connection refused) opens the circuit at once."""
        self.failures += 1
        if self.healthy and (decisive or self.failures >= self._failures_to_open):
            self.healthy = False
            self.open_until = time.monotonic() + self._open_s
            log.warning("replica.down", namespace=self.namespace, replica=self.url, failures=self.failures)
            self.on_state(self)
            self.on_down(self)


def _unjudged(*, decisive: bool = False) -> None:
    """Where a probe is the caller: it gives its own verdict once the whole probe is over (`health.probe`)."""


@contextlib.contextmanager
def upstream_errors(replica: Replica, *, passive: bool = True) -> Iterator[None]:
    """Map transport failures to gateway errors and, for calls (`passive`), feed the replica's passive health."""
    record_failure = replica.record_failure if passive else _unjudged
    try:
        yield
    except SseOverflow as exc:  # the replica answered, too much: not a failure of its health
        raise BadUpstream(str(exc)) from exc
    except InvalidHeader as exc:  # nothing was sent, and the replica's health does not count it
        if exc.name == "mcp-session-id":  # the one header whose value a replica chose (clients' are dropped)
            raise BadUpstream(f"a replica of {replica.namespace!r} gave a session id no header can carry") from exc
        raise InvalidRequest(f"refused before it reached {replica.namespace!r}: {exc}") from exc
    except ConnectFailed as exc:
        record_failure(decisive=True)
        raise Unreached(f"a replica of {replica.namespace!r} is unreachable") from exc
    except ClosedUnanswered as exc:  # a close counts toward the circuit, not at once: it may be load shed
        record_failure(decisive=exc.reset)
        raise Unanswered(f"a replica of {replica.namespace!r} closed the connection unanswered") from exc
    except TimeoutError as exc:
        record_failure()
        raise UpstreamTimeout(f"a replica of {replica.namespace!r} timed out") from exc
    except (ConnectionError, ProtocolError, asyncio.IncompleteReadError) as exc:
        record_failure(decisive=True)
        raise Unavailable(f"a replica of {replica.namespace!r} dropped the connection") from exc
    except OSError as exc:
        record_failure()
        raise BadUpstream(f"a replica of {replica.namespace!r} failed: {type(exc).__name__}") from exc


def make_client(cfg: PoolConfig) -> Pool:
    """One pool of keep-alive connections for every upstream."""
    return Pool(max_idle=cfg.max_idle, idle_s=cfg.idle_s)


async def open_stream(
    client: Pool,
    replica: Replica,
    method: str,
    headers: dict[str, str],
    body: bytes | None = None,
    *,
    http_timeout: Timeouts = DEFAULT_TIMEOUTS,
    passive: bool = True,
) -> Response:
    """Send one request upstream and return the response with its body not yet read; its outcome counts
    toward the replica's health unless the caller judges it itself (a probe: not `passive`)."""
    with upstream_errors(replica, passive=passive):
        response = await client.request(method, replica.url, headers, body, http_timeout)
    replica.heard(response)
    if replica.draining and response.status_code == 503:
        await response.aclose()  # it refused to open a session, and is alive: no failure
        raise Draining(f"a replica of {replica.namespace!r} is draining: it takes no new session")
    if passive:
        if response.status_code >= 500:
            replica.record_failure()
        else:
            replica.record_success()
    return response
