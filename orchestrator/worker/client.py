"""vLLM worker client: token-id prompts over `/v1/completions` (Harmony workers) or chat messages over
`/v1/chat/completions` (chat-template workers), balanced over several workers with affinity.

Worker health. A worker's HTTP server (uvicorn, for vLLM and the stand-in alike) closes a connection idle for
its keep-alive (5 s by default), and a request sent on it as it closes fails though the worker is fine. So
idle connections are dropped sooner (`keepalive_expiry_s`), a request that a pooled connection ends without an
answer (such a close) is sent once more on a new connection before it counts, and a worker is down only after
`down_after` health checks fail in a row, or when a request fails on a new connection. While no worker is up,
requests still try the down ones (the fleet's only chance) and report the real error if that fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import structlog

from orchestrator.harmony import START, STOP_TOKENS
from orchestrator.settings import KEEPALIVE_EXPIRY_S, WORKER_DOWN_AFTER
from orchestrator.worker.affinity import Affinity, MemoryAffinity
from toolkit.mcpwire import sse
from toolkit.mcpwire.http import ClosedUnanswered, ConnectFailed, Pool, ProtocolError, Response, Timeouts
from toolkit.tracing import outgoing

log = structlog.get_logger(__name__)

Api = Literal["harmony", "chat"]
API_CHOICES = ("auto", "harmony", "chat")
_FIXED: dict[str, Api] = {"harmony": "harmony", "chat": "chat"}
"""The configured apis that fix a worker's path; `auto` is detected."""
T = TypeVar("T")
TRANSPORT = (OSError, ProtocolError, ClosedUnanswered, ConnectFailed)
"""How a request to a worker fails below HTTP (a timeout is an `OSError`); a pooled connection its server closed
as the request went out is not among them: the pool sends that request again on a new one."""
MAX_IDLE = 1024
"""Idle connections kept per worker (one per request in flight at the busiest moment, reused after)."""
BODY_BYTES = 256 << 20
"""The most of a whole (not streamed) answer read: a model list, a token count, a relayed chat completion (whose
logprobs, 20 alternatives a token over a long answer, can reach some tens of MiB)."""
ERROR_BYTES = 4096
"""The most of an error answer's body read: its first 500 characters are relayed."""
CHECK_TIMEOUTS = Timeouts(connect=5.0, read=5.0)
"""A health check's (and a metrics scrape's) connect and read timeouts."""
COUNT_TIMEOUTS = Timeouts(connect=30.0, read=30.0)
"""A prompt count's (`/tokenize`)."""


class WorkerUnavailable(Exception):
    """No worker could take the request (all down, or every try failed before the first token): HTTP 503."""


class WorkerError(Exception):
    """A worker broke the protocol or failed mid-generation: HTTP 502."""


@dataclass
class GenerateRequest:
    prompt: list[int]
    max_tokens: int
    sampling: dict[str, float] = field(default_factory=dict)  # temperature, top_p, penalties: sent as they are
    affinity: Sequence[str] = ()  # its affinity keys (`affinity.keys_for`): stays on the worker holding its prefix
    logprobs: int | None = None  # top logprobs per token (vLLM `logprobs`); None: none asked
    structured: dict[str, Any] | None = None  # vLLM `structured_outputs`: the constraint on what is generated


@dataclass
class Chunk:
    token_ids: list[int]
    prompt_tokens: int | None = None  # first chunk only
    cached_tokens: int | None = None  # usage chunk only
    finish_reason: str | None = None
    logprobs: list[TokenLogprob | None] | None = None  # one per token id, when asked


@dataclass
class TokenLogprob:
    logprob: float
    top: list[tuple[str, float]]  # the most likely tokens at this step, best first


Generate = Callable[[GenerateRequest], AsyncIterator[Chunk]]
"""The seam the turn loop uses: a worker pool in production, anything that yields chunks in tests."""


@dataclass
class ChatRequest:
    body: dict[str, Any]  # a `/v1/chat/completions` body without `model` (the worker's name is filled in)
    affinity: Sequence[str] = ()


Chat = Callable[[ChatRequest], AsyncIterator[dict[str, Any]]]
"""The chat path's seam: yields vLLM's chat-completion chunk objects as they arrive."""
CountChat = Callable[[ChatRequest], Awaitable[int]]
"""The chat path's token count: the prompt a chat body renders to, by the worker's own template."""


@dataclass
class _Worker:
    url: str
    outstanding: int = 0
    healthy: bool = True
    model: str | None = None
    failures_before: int = 0  # failed before the first token (retried elsewhere)
    failures_mid: int = 0  # failed after it (the response fails: 502)
    api: Api | None = None  # which path drives it; None until detected (auto)
    seen: bool = False  # it answered once: until then its first failed check takes it out
    failed_checks: int = 0  # health checks failed in a row
    check_failures: Counter[str] = field(default_factory=Counter)  # failed health checks, by error class
    downs: Counter[str] = field(default_factory=Counter)  # times taken out, by the error class that did it
    reconnects: Counter[str] = field(default_factory=Counter)  # errors on a pooled connection, retried on a new one
    affinity: Counter[str] = field(default_factory=Counter)  # hit (its pin), miss (sent here unpinned), spill (left)
    prefix_cache: dict[str, float] = field(default_factory=dict)  # its own vLLM counters, hits and queries, scraped


class WorkerPool:
    """Least-outstanding-requests over healthy workers; a conversation sticks to the worker that served it."""

    def __init__(
        self,
        urls: list[str],
        *,
        model: str | None = None,
        health_interval_s: float = 5.0,
        affinity: Affinity | None = None,
        spill_at: int = 32,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 600.0,
        api: str = "auto",
        apis: dict[str, str] | None = None,
        down_after: int = WORKER_DOWN_AFTER,
        keepalive_expiry_s: float = KEEPALIVE_EXPIRY_S,
    ) -> None:
        if not urls:
            raise ValueError("at least one worker URL is needed")
        chosen = {u.rstrip("/"): a for u, a in (apis or {}).items()}
        for value in (api, *chosen.values()):
            if value not in API_CHOICES:
                raise ValueError(f"worker api {value!r} is not one of {', '.join(API_CHOICES)}")
        self.workers = [_Worker(u.rstrip("/"), api=_FIXED.get(chosen.get(u.rstrip("/"), api))) for u in urls]
        self.model = model
        for w in self.workers:
            _refuse_proxy(w.url)
        self.link = _Link(Timeouts(connect=connect_timeout_s, read=read_timeout_s), keepalive_expiry_s)
        self._health_interval_s = health_interval_s
        self._down_after = down_after
        self.affinity = affinity if affinity is not None else MemoryAffinity(10_000, 3600.0)
        self._spill_at = spill_at
        self.scrape_cache = False  # set once /metrics is read: only then are the workers' own metrics scraped
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.check_health()
        self._task = asyncio.create_task(self._health_loop())

    async def aclose(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.link.aclose()
        await self.affinity.aclose()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self._health_interval_s)
            await self.check_health()

    async def check_health(self) -> None:
        await asyncio.gather(*(self._check(w) for w in self.workers))

    async def _check(self, worker: _Worker) -> None:
        try:
            await self.link.probe(worker)
        except Exception as exc:
            self._check_failed(worker, exc)
        else:
            self._passed(worker)
            if self.scrape_cache:
                await self.link.scrape_cache(worker)

    def _passed(self, worker: _Worker) -> None:
        """A check passed or a request was served: the worker is up, and its failed checks count from 0 again."""
        if not worker.healthy:
            log.info("worker.up", url=worker.url)
        worker.healthy, worker.seen, worker.failed_checks = True, True, 0

    def _check_failed(self, worker: _Worker, exc: Exception) -> None:
        """One failed check (after its retry on a new connection) counts; `down_after` in a row take the worker
        out, and so does the first check of a worker that never answered (nothing showed it up)."""
        worker.failed_checks += 1
        worker.check_failures[type(exc).__name__] += 1
        if worker.failed_checks >= self._down_after or not worker.seen:
            self._down(worker, exc, f"{worker.failed_checks} health check(s) in a row failed")
        elif worker.healthy:
            log.warning(
                "worker.check_failed",
                url=worker.url,
                error_class=type(exc).__name__,
                error=_text(exc),
                failed_in_a_row=worker.failed_checks,
                down_after=self._down_after,
            )

    def _down(self, worker: _Worker, exc: Exception, reason: str) -> None:
        if worker.healthy:
            worker.downs[type(exc).__name__] += 1
            log.warning("worker.down", url=worker.url, reason=reason, error_class=type(exc).__name__, error=_text(exc))
        worker.healthy = False

    def api_for(self, model: str | None) -> Api | None:
        """The path a request for `model` takes: the api of the workers up that serve that model name, else of
        any worker up (the first in list order breaks a tie), the down ones while none is up; None while none
        is known."""
        known = _up([w for w in self.workers if w.api])
        named = [w for w in known if model and w.model == model]
        chosen = named or known
        return chosen[0].api if chosen else None

    async def models(self) -> list[str]:
        names = {w.model for w in _up(self.workers) if w.model}
        return sorted(names) or ([self.model] if self.model else [])

    def _ordered(self, api: Api) -> list[_Worker]:
        return sorted(_up([w for w in self.workers if w.api in (api, None)]), key=lambda w: w.outstanding)

    async def _candidates(self, affinity: Sequence[str], api: Api) -> list[_Worker]:
        """The workers of `api` to try in order: the conversation's pinned worker first unless it is saturated
        (`spill_at` requests in flight from this replica, and another has fewer), then the least loaded; while
        none is up, the down ones (a request tries them anyway and reports what failed). Nothing awaits after
        the map is read, so the caller counts its request on the first worker before another request sorts."""
        url = await self.affinity.find(affinity) if affinity else None
        ordered = self._ordered(api)
        pinned = next((w for w in ordered if w.url == url), None)
        if not affinity or not ordered:
            return ordered
        if pinned is None:
            ordered[0].affinity["miss"] += 1
        elif pinned.outstanding >= self._spill_at and ordered[0].outstanding < pinned.outstanding:
            pinned.affinity["spill"] += 1  # re-pinned to where it goes once that worker answers
            log.info("affinity.spill", pinned=pinned.url, to=ordered[0].url, outstanding=pinned.outstanding)
        else:
            pinned.affinity["hit"] += 1
            ordered.remove(pinned)
            ordered.insert(0, pinned)
        return ordered

    async def generate(self, req: GenerateRequest) -> AsyncIterator[Chunk]:
        """Stream the completion; retried on another worker only while no token has been received."""
        chunks = self._balanced(req.affinity, "harmony", lambda w: self._stream(w, req), lambda c: bool(c.token_ids))
        async for chunk in chunks:
            yield chunk

    async def chat(self, req: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        """Stream a chat completion from a chat worker; retried elsewhere only before any delta arrived."""
        chunks = self._balanced(req.affinity, "chat", lambda w: self._chat_stream(w, req), _has_delta)
        async for chunk in chunks:
            yield chunk

    async def relay_chat(self, body: dict[str, Any], *, stream: bool) -> AsyncIterator[dict[str, Any]]:
        """A client's own chat completion on a worker of the path serving its `model` (any vLLM serves chat
        completions): the chunks when streaming, else the one answer; retried elsewhere before any output."""
        api = self.api_for(body.get("model")) or "harmony"

        def open_stream(worker: _Worker) -> AsyncIterator[dict[str, Any]]:
            sent = {**body, "model": worker.model or self.model or "default"}
            if stream:
                return self.link.post_stream(worker, "/v1/chat/completions", sent)
            return self.link.post_json(worker, "/v1/chat/completions", sent)

        chunks = self._balanced((), api, open_stream, lambda obj: not stream or _has_delta(obj))
        async for chunk in chunks:
            yield chunk

    async def count_chat(self, req: ChatRequest) -> int:
        """vLLM's `/tokenize` of a chat body's messages and tools on a chat worker: its template decides."""
        candidates = self._ordered("chat")
        if not candidates:
            raise WorkerUnavailable("no vLLM worker for the chat path")
        worker = candidates[0]
        if worker.model is None:
            await self._check(worker)
        body = {
            "model": worker.model or self.model or "default",
            "messages": req.body["messages"],
            "add_generation_prompt": True,
        }
        if req.body.get("tools"):
            body["tools"] = req.body["tools"]
        try:
            status, data = await self.link.whole(worker, "count", "/tokenize", body, timeouts=COUNT_TIMEOUTS)
        except TRANSPORT as exc:
            raise WorkerUnavailable(f"{worker.url}: {_text(exc)}") from exc
        if status != 200:
            raise WorkerError(f"worker {worker.url} could not count the prompt: HTTP {status}")
        return int(json.loads(data)["count"])

    async def _balanced(
        self,
        affinity: Sequence[str],
        api: Api,
        open_stream: Callable[[_Worker], AsyncIterator[T]],
        begun: Callable[[T], bool],
    ) -> AsyncIterator[T]:
        candidates = await self._candidates(affinity, api)
        if not candidates:
            raise WorkerUnavailable(f"no vLLM worker for the {api} path")
        last_error = "no worker answered"
        for worker in candidates:
            started = False
            worker.outstanding += 1
            try:
                async for chunk in open_stream(worker):
                    first = not started and begun(chunk)
                    if first:
                        started = True  # from here on the tokens are the client's: no retry
                        self._passed(worker)
                    yield chunk
                    if first and affinity:  # pinned once the first token is out: its round trip delays none
                        await self.affinity.pin(affinity, worker.url)
                return
            except (*TRANSPORT, _RetryableStatus, _StreamError) as exc:
                if started:
                    worker.failures_mid += 1
                    raise WorkerError(f"worker {worker.url} failed mid-generation: {_text(exc)}") from exc
                worker.failures_before += 1
                last_error = f"{worker.url}: {_text(exc)}"
                if isinstance(exc, TRANSPORT):  # not a pooled connection closing: the pool sent that once more
                    self._down(worker, exc, "a request failed on a new connection, or once the worker answered")
                log.warning("worker.retry", url=worker.url, error=last_error)
            finally:
                worker.outstanding -= 1
        raise WorkerUnavailable(f"no vLLM worker could serve the request ({last_error})")

    async def _stream(self, worker: _Worker, req: GenerateRequest) -> AsyncIterator[Chunk]:
        if worker.model is None:
            await self._check(worker)
        body = {
            "model": worker.model or self.model or "default",
            "prompt": req.prompt,
            "max_tokens": req.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "stop_token_ids": list(STOP_TOKENS),
            "skip_special_tokens": False,
        }
        body.update(req.sampling)
        if req.structured is not None:
            body["structured_outputs"] = req.structured
        if req.logprobs is not None:
            body["logprobs"] = req.logprobs
        async for obj in self.link.post_stream(worker, "/v1/completions", body):
            for chunk in _completion_chunks(obj):
                yield chunk

    async def _chat_stream(self, worker: _Worker, req: ChatRequest) -> AsyncIterator[dict[str, Any]]:
        if worker.model is None:
            await self._check(worker)
        body = {"model": worker.model or self.model or "default", **req.body}
        async for obj in self.link.post_stream(worker, "/v1/chat/completions", body):
            yield obj


class _Link:
    """The HTTP to the workers, on the kit's keep-alive pool (`toolkit.mcpwire.http`, which the gateway and the
    MCP client use too; httpx cost a plain response ~30% of the orchestrator's CPU): a request that meets a
    closing pooled connection goes out once more on a new one (counted in `reconnects`), the health probe,
    and the streamed and whole posts."""

    def __init__(self, timeouts: Timeouts, keepalive_expiry_s: float) -> None:
        self._pool = Pool(max_idle=MAX_IDLE, idle_s=keepalive_expiry_s)
        self._timeouts = timeouts

    async def aclose(self) -> None:
        self._pool.close()

    async def send(
        self,
        worker: _Worker,
        what: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        timeouts: Timeouts | None = None,
    ) -> Response:
        """`body` as JSON (POST), else a GET; the caller reads and closes the response."""
        fields = {**(headers or {}), "content-type": "application/json"} if body is not None else headers or {}
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode() if body is not None else None
        return await self._pool.request(
            "POST" if body is not None else "GET",
            f"{worker.url}{path}",
            fields,
            data,
            timeouts or self._timeouts,
            retried=lambda exc: self._reconnect(worker, exc, what),
        )

    async def whole(
        self, worker: _Worker, what: str, path: str, body: dict[str, Any] | None = None, **kw: Any
    ) -> tuple[int, bytes]:
        """A request whose answer is read whole: (status, body)."""
        resp = await self.send(worker, what, path, body, **kw)
        try:
            return resp.status_code, await resp.aread(BODY_BYTES)
        finally:
            await resp.aclose()

    async def probe(self, worker: _Worker) -> None:
        """One health check: the model the worker serves, and its path once (auto)."""
        status, data = await self.whole(worker, "check", "/v1/models", timeouts=CHECK_TIMEOUTS)
        if status != 200:
            raise StatusError(f"GET /v1/models answered HTTP {status}")
        worker.model = json.loads(data)["data"][0]["id"]
        if worker.api is None:
            worker.api = await self._detect_api(worker)
            log.info("worker.api", url=worker.url, model=worker.model, api=worker.api)

    async def scrape_cache(self, worker: _Worker) -> None:
        """The worker's own prefix-cache counters from its `/metrics` (vLLM's, or the stand-in's), read as the
        health check runs; at most `METRICS_BYTES` of it, and never again from a worker that has none."""
        if worker.prefix_cache.get("absent"):
            return
        try:
            resp = await self.send(worker, "metrics", "/metrics", timeouts=CHECK_TIMEOUTS)
            try:
                if resp.status_code != 200:
                    worker.prefix_cache = {"absent": 1.0}
                    return
                text = await _bounded(resp.aiter_bytes(), METRICS_BYTES)
            finally:
                await resp.aclose()
        except TRANSPORT as exc:
            log.info("worker.metrics_failed", url=worker.url, error=_text(exc))
            return
        worker.prefix_cache = prefix_cache_counters(text)

    def _reconnect(self, worker: _Worker, exc: Exception, what: str) -> None:
        worker.reconnects[type(exc).__name__] += 1
        log.info("worker.reconnect", url=worker.url, during=what, error_class=type(exc).__name__, error=_text(exc))

    async def _detect_api(self, worker: _Worker) -> Api:
        """Harmony when the worker's tokenizer has Harmony's `<|start|>` as one special token (id 200006),
        else chat; a worker without vLLM's `/tokenize` (a completions-only server) is taken as Harmony."""
        body = {"model": worker.model, "prompt": "<|start|>", "add_special_tokens": False}
        status, data = await self.whole(worker, "check", "/tokenize", body, timeouts=CHECK_TIMEOUTS)
        if status in (404, 405):
            return "harmony"
        if status != 200:
            raise StatusError(f"POST /tokenize answered HTTP {status}")
        return "harmony" if json.loads(data).get("tokens") == [START] else "chat"

    async def post_json(self, worker: _Worker, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        with outgoing(f"worker {path}", worker=worker.url, model=body.get("model")) as headers:
            status, data = await self.whole(worker, "request", path, body, headers=headers)
        _check_status(status, data.decode(errors="replace"), worker)
        yield json.loads(data)

    async def post_stream(self, worker: _Worker, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        with outgoing(f"worker {path}", worker=worker.url, model=body.get("model")) as headers:
            resp = await self.send(worker, "request", path, body, headers=headers)
            try:
                if resp.status_code != 200:
                    retryable = resp.status_code >= 500 or resp.status_code == 429
                    text = "" if retryable else await _bounded(resp.aiter_bytes(), ERROR_BYTES)
                    _check_status(resp.status_code, text, worker)
                async for obj in sse_objects(resp.aiter_bytes()):
                    yield obj
            finally:
                await resp.aclose()  # unread: the connection is closed, and vLLM aborts the request


def _check_status(status: int, text: str, worker: _Worker) -> None:
    """A worker's answer other than 200: a 5xx or 429 may go to another worker, a 4xx is the request's fault."""
    if status >= 500 or status == 429:
        raise _RetryableStatus(f"HTTP {status}")
    if status != 200:
        raise WorkerRefused(status, text[:500], worker.url)


class WorkerRefused(WorkerError):
    """The worker answered a 4xx: the request itself is at fault (its status and message, relayed as they are)."""

    def __init__(self, status: int, text: str, url: str = "") -> None:
        super().__init__(f"worker {url} refused the request: HTTP {status}: {text}")
        self.status, self.text = status, text


class _RetryableStatus(Exception):
    """HTTP 5xx or 429 before any token: another worker may serve the request."""


METRICS_BYTES = 4 << 20
"""The most of a worker's `/metrics` read (vLLM's is some tens of KiB; its histograms grow with engines)."""
CACHE_COUNTERS = {"vllm:prefix_cache_hits_total": "hits", "vllm:prefix_cache_queries_total": "queries"}
"""vLLM 0.32's prefix-cache counters (in tokens, one sample per engine) and what they are called here."""


async def _bounded(chunks: AsyncIterator[bytes], limit: int) -> str:
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) >= limit:
            break
    return body[:limit].decode(errors="replace")


def prefix_cache_counters(text: str) -> dict[str, float]:
    """The prefix-cache counters of a Prometheus text body, summed over their label sets (engines)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        if name in CACHE_COUNTERS:
            value = rest.rsplit(" ", 1)[-1]
            with contextlib.suppress(ValueError):
                found[CACHE_COUNTERS[name]] = found.get(CACHE_COUNTERS[name], 0.0) + float(value)
    return found


def _up(workers: list[_Worker]) -> list[_Worker]:
    """The workers up; while none is, all of them (a down worker is tried rather than the request refused)."""
    return [w for w in workers if w.healthy] or workers


def _text(exc: BaseException) -> str:
    """An error as logs and messages say it: its class, and its text when it has one."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _StreamError(WorkerError):
    """vLLM reported an engine error inside the stream (`data: {"error": ...}`)."""


class StatusError(Exception):
    """A worker answered a health check with an HTTP error status."""


def _shown(data: bytes) -> str:
    return repr(data[:200].decode(errors="replace"))


def _refuse_proxy(url: str) -> None:
    """Workers are reached directly. httpx, this client's transport before, sent them through a proxy named in
    the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`); such a setting is refused rather than passed by."""
    proxies = urllib.request.getproxies_environment()
    parts = urlsplit(url)
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        raise ValueError(
            f"worker {url} would go through the proxy {proxy} named in the environment, and the worker client "
            "connects directly: name the worker's host in NO_PROXY"
        )


async def sse_objects(body: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """vLLM's stream framing, read through the kit's event-stream reader: `data: {json}` events until
    `data: [DONE]`; an `{"error": ...}` event raises. The body is read to its end after `[DONE]` (`_drained`): a
    response closed unread closes its connection, and the next request to the worker would pay for a new one."""
    stream = sse.events(body)
    async for _, sent in stream:
        if sent is None:
            continue
        data = sent.strip()
        if data == b"[DONE]":
            await _drained(stream)
            return
        try:
            obj = json.loads(data)
        except ValueError as exc:  # not JSON, or not UTF-8
            raise WorkerError(f"worker sent a malformed stream chunk: {_shown(data)}") from exc
        if not isinstance(obj, dict):
            raise WorkerError(f"worker sent a stream chunk that is not an object: {_shown(data)}")
        if not obj.get("choices") and ("error" in obj or obj.get("object") == "error"):
            error = obj.get("error") if isinstance(obj.get("error"), dict) else obj
            raise _StreamError(f"worker error: {error.get('message') or error}")
        yield obj


DRAIN_EVENTS = 4
"""Events read past `[DONE]` at most (vLLM sends none: only the body's end follows); a worker that sends more
has its connection closed rather than read on."""


async def _drained(stream: AsyncIterator[tuple[bytes, bytes | None]]) -> None:
    for _ in range(DRAIN_EVENTS):
        if await anext(stream, None) is None:
            return


def _completion_chunks(obj: dict[str, Any]) -> list[Chunk]:
    out = []
    choices = obj.get("choices") or []
    if choices:
        choice = choices[0]
        ids = choice.get("token_ids")
        if ids is None:
            raise WorkerError("worker does not return token ids (needs vLLM with return_token_ids)")
        prompt = choice.get("prompt_token_ids")
        out.append(
            Chunk(
                list(ids),
                len(prompt) if prompt is not None else None,
                None,
                choice.get("finish_reason"),
                _logprobs(choice.get("logprobs"), len(ids)),
            )
        )
    if usage := obj.get("usage"):
        details = usage.get("prompt_tokens_details") or {}
        out.append(Chunk([], usage.get("prompt_tokens"), details.get("cached_tokens") or 0, None))
    return out


def _has_delta(obj: dict[str, Any]) -> bool:
    """Whether a chat chunk carries generated output (text, reasoning or a tool call), not just the role."""
    for choice in obj.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
    return False


def _logprobs(data: object, n: int) -> list[TokenLogprob | None] | None:
    """vLLM's completion `logprobs` ({tokens, token_logprobs, top_logprobs, text_offset}) per token id."""
    if not isinstance(data, dict) or not isinstance(data.get("token_logprobs"), list):
        return None
    values, tops = data["token_logprobs"], data.get("top_logprobs") or []
    out: list[TokenLogprob | None] = []
    for i in range(n):
        value = values[i] if i < len(values) else None
        if not isinstance(value, int | float):
            out.append(None)
            continue
        top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        ranked = sorted(((str(k), float(v)) for k, v in top.items()), key=lambda kv: -kv[1])
        out.append(TokenLogprob(float(value), ranked))
    return out
