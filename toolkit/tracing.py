"""OpenTelemetry tracing for every service: set up once, W3C trace context in and out, one span helper.

A client's `traceparent` (or a new trace) travels orchestrator -> worker -> gateway -> tool server ->
sandbox; each hop opens a span here and sends the context on with `inject`. Exporting is off unless
asked for: `--otlp-endpoint` (the `otlp` extra) ships spans to a collector, and the environment
variable `TOOLFLEET_TRACE_FILE` appends each finished span as one JSON line to a file, which is how
the tests collect one trace across real processes. Without either, spans still exist (log lines get
their trace id and the context is propagated), they are just not exported.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract as _extract
from opentelemetry.propagate import inject as _inject
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NoOpTracer, ProxyTracer, Span, SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Receive, Scope, Send
from structlog.typing import EventDict

from toolkit.settings import ServiceSettings
from toolkit.wire import REQUEST_ID_HEADER

H = TypeVar("H", bound=MutableMapping[str, str])

TRACE_FILE_ENV = "TOOLFLEET_TRACE_FILE"
"""Path that every process of a test run appends its finished spans to (JSON lines). Test use only:
each span is written synchronously as it ends (O_APPEND keeps the processes' lines apart)."""

ATTR = "toolfleet."
"""Prefix of our span attributes: response_id, conversation_id, session_id, namespace, tool, outcome."""

_tracer = trace.get_tracer("toolfleet")

Headers = Mapping[str, str] | Iterable[tuple[bytes, bytes]]


class JsonLinesExporter(SpanExporter):
    """Appends each span as one JSON object per line; a lock keeps lines whole across threads."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(_as_dict(s)) + "\n" for s in spans)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(lines)
        return SpanExportResult.SUCCESS


def _as_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx, parent = span.get_span_context(), span.parent
    assert ctx is not None  # a span has its context from the start; only the API's type allows none
    return {
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent else None,
        "kind": span.kind.name,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


def setup_tracing(settings: ServiceSettings, *, service: str) -> None:
    """Install the SDK tracer provider for this process (entrypoints only; libraries just open spans)."""
    if not settings.tracing:
        return  # the API's no-op tracer: spans cost nothing and only forward an incoming context
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if path := os.environ.get(TRACE_FILE_ENV):
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    if otlp_endpoint := settings.otlp_endpoint:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise SystemExit("--otlp-endpoint needs the exporter: pip install 'toolfleet[otlp]'") from exc
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    trace.set_tracer_provider(provider)


def flush_tracing(timeout_s: float = 3.0) -> None:
    """Export the spans still queued (blocking, bounded); uvicorn re-raises SIGTERM after a graceful
    shutdown, which kills the process before the SDK's own at-exit flush could run."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush(int(timeout_s * 1000))


def extract(headers: Headers) -> otel_context.Context | None:
    """The trace context a caller sent (`traceparent` / `tracestate`), as a parent for our span; None when
    there is none (or it is malformed), so the span nests under the current one or starts a trace."""
    if not isinstance(headers, Mapping):
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
    ctx = _extract({k.lower(): v for k, v in headers.items()})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def inject(headers: H) -> H:
    """Write the current span's context into outgoing `headers` (a dict or a client's own headers object,
    replacing the caller's) and return them."""
    headers.pop("traceparent", None)
    headers.pop("tracestate", None)
    _inject(headers)
    return headers


def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: otel_context.Context | None = None,
    expected: tuple[type[Exception], ...] = (),
    **attributes: Any,
) -> contextlib.AbstractContextManager[Span]:
    """A current span named `name` with `toolfleet.*` attributes; an escaping exception marks it failed. An
    `expected` one (a caller's misuse, answered as such) is recorded by type and message only: formatting its
    traceback was the largest single cost of a refused tool call.

    Under the API's no-op tracer (tracing off) a span without `parent` would be the current span itself, so none
    is opened: log lines and `inject` read the same context, and a tool call saves the 6 us of opening one."""
    if parent is None and _untraced():
        return contextlib.nullcontext(trace.get_current_span())
    return _opened(name, kind, parent, expected, {ATTR + k: v for k, v in attributes.items() if v is not None})


def _untraced() -> bool:
    """Whether `_tracer` makes the API's no-op spans: it is the API's proxy, which has no provider to ask yet (the
    proxy's own choice, read from it; `get_tracer_provider()` would look the environment up, 1.5 us a call)."""
    return type(_tracer) is ProxyTracer and type(_tracer._tracer) is NoOpTracer


@contextlib.contextmanager
def _opened(
    name: str,
    kind: SpanKind,
    parent: otel_context.Context | None,
    expected: tuple[type[Exception], ...],
    attrs: dict[str, Any],
) -> Iterator[Span]:
    with _tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=attrs, record_exception=False
    ) as current:
        try:
            yield current
        except Exception as exc:
            if current.is_recording():
                _record(current, exc, with_stack=not isinstance(exc, expected))
            raise


def _record(current: Span, exc: Exception, *, with_stack: bool) -> None:
    if with_stack:
        current.record_exception(exc)
        return
    kind = type(exc)
    current.add_event(
        "exception",
        {"exception.type": f"{kind.__module__}.{kind.__qualname__}", "exception.message": str(exc)},
    )


@contextlib.contextmanager
def outgoing(name: str, **attributes: Any) -> Iterator[dict[str, str]]:
    """A client span that is never made current, so it is safe across an async generator's yields; yields
    the headers that carry it to the callee."""
    attrs = {ATTR + k: v for k, v in attributes.items() if v is not None}
    current = _tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attrs)
    headers: dict[str, str] = {}
    _inject(headers, context=trace.set_span_in_context(current))
    try:
        yield headers
    except Exception as exc:
        current.record_exception(exc)
        current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        current.end()


def annotate(current: Span, **attributes: Any) -> None:
    """Add `toolfleet.*` attributes (the outcome, an id learnt late) to a span; `outcome` != ok marks an error."""
    for key, value in attributes.items():
        if value is not None:
            current.set_attribute(ATTR + key, value)
    outcome = attributes.get("outcome")
    if outcome is not None and outcome != "ok":
        current.set_status(Status(StatusCode.ERROR, str(outcome)))


_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


@contextlib.contextmanager
def request_context(sent: str | None, **ids: Any) -> Iterator[str]:
    """Bind a request's ids for its log lines: `sent`, the caller's `x-request-id`, when it is a sane token (so
    one id joins the logs of every hop), else a new one. Yields the request id, to send on to the next hop."""
    rid = sent if sent is not None and _REQUEST_ID.match(sent) else uuid.uuid4().hex[:16]
    token = _bound_request_id.set(rid)
    try:
        with structlog.contextvars.bound_contextvars(request_id=rid, **ids):
            yield rid
    finally:
        _bound_request_id.reset(token)


_bound_request_id: ContextVar[str | None] = ContextVar("toolfleet_request_id", default=None)
"""The id `request_context` bound, beside structlog's copy: reading structlog's walks every context variable
(2 us per tool call)."""


def current_request_id() -> str | None:
    """The request id bound for the current task, if any (sent on as `x-request-id`)."""
    return _bound_request_id.get()


def current_trace_id() -> str | None:
    """The current span's trace id, as the logs write it (None: no span, or tracing is off)."""
    ctx = trace.get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid else None


def trace_ids(_logger: Any, _name: str, event: EventDict) -> EventDict:
    """structlog processor: the current span's trace and span ids on every log line."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event["trace_id"] = f"{ctx.trace_id:032x}"
        event["span_id"] = f"{ctx.span_id:016x}"
    return event


class TracingMiddleware:
    """Pure ASGI: one server span per HTTP request, child of the caller's `traceparent` (or the framework's
    own server span, when it made one), with a request id (the caller's `x-request-id` or a new one) on
    the span and bound for the log lines of that request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        name = f"{scope['method']} {scope['path']}"
        framework = trace.get_current_span()  # FastAPI opens its own server span (from the same traceparent)
        opened = (
            contextlib.nullcontext(framework)
            if framework.is_recording()
            else span(name, kind=SpanKind.SERVER, parent=extract(headers))
        )
        with opened as current, request_context(headers.get(REQUEST_ID_HEADER)) as rid:
            current.set_attribute(ATTR + "request_id", rid)  # the status code is the framework span's to record
            await self.app(scope, receive, send)
