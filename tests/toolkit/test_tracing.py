"""The kit's tracing helpers: W3C context in and out, trace ids on log lines, the JSON-lines span exporter."""

from __future__ import annotations

import contextlib
import json

import structlog
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from toolkit import tracing
from toolkit.tracing import JsonLinesExporter, current_request_id, extract, inject, request_context, trace_ids

TRACE, SPAN = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
TRACEPARENT = f"00-{TRACE:032x}-{SPAN:016x}-01"


def _current() -> NonRecordingSpan:
    return NonRecordingSpan(SpanContext(TRACE, SPAN, is_remote=False, trace_flags=TraceFlags(1)))


def test_extract_reads_traceparent_from_asgi_or_mapping_headers_and_refuses_garbage() -> None:
    for headers in ({"TraceParent": TRACEPARENT}, [(b"traceparent", TRACEPARENT.encode())]):
        ctx = extract(headers)
        assert ctx is not None and trace.get_current_span(ctx).get_span_context().trace_id == TRACE
    for bad in ({}, {"traceparent": "00-zz-yy-01"}, {"traceparent": f"00-{0:032x}-{SPAN:016x}-01"}):
        assert extract(bad) is None  # None: the span nests under the current one or starts a new trace


def test_inject_replaces_the_callers_trace_context_with_the_current_span() -> None:
    with trace.use_span(_current()):
        headers = inject({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "tracestate": "a=b", "x": "y"})
    assert headers == {"traceparent": TRACEPARENT, "x": "y"}


def test_with_tracing_off_a_span_is_the_current_one_so_a_callers_context_still_travels_on() -> None:
    with trace.use_span(_current()):  # a caller's traceparent, made current by the server's middleware
        with tracing.span("tool python", kind=SpanKind.CLIENT, tool="python") as inner:
            assert inner is trace.get_current_span()
            assert inject({}) == {"traceparent": TRACEPARENT}
            assert trace_ids(None, "info", {})["span_id"] == f"{SPAN:016x}"
    with tracing.span("tool python", kind=SpanKind.CLIENT, tool="python") as inner:
        assert not inner.get_span_context().is_valid and inject({}) == {}


def test_the_request_id_sent_on_is_the_one_bound_for_the_log_lines_and_only_while_bound() -> None:
    assert current_request_id() is None
    with request_context("outer-1") as outer:
        with request_context("bad id\r\n") as inner:
            assert inner != "bad id\r\n" and current_request_id() == inner
            assert structlog.contextvars.get_contextvars()["request_id"] == inner
        assert outer == "outer-1" == current_request_id() == structlog.contextvars.get_contextvars()["request_id"]
    assert current_request_id() is None and "request_id" not in structlog.contextvars.get_contextvars()


def test_log_lines_carry_the_current_trace_and_span_ids_and_nothing_outside_a_span() -> None:
    with trace.use_span(_current()):
        assert trace_ids(None, "info", {"event": "e"}) == {
            "event": "e",
            "trace_id": f"{TRACE:032x}",
            "span_id": f"{SPAN:016x}",
        }
    assert trace_ids(None, "info", {"event": "e", "trace_id": "bound"}) == {"event": "e", "trace_id": "bound"}


def test_the_file_exporter_writes_one_json_line_per_span_with_its_parent_link(tmp_path) -> None:
    path = tmp_path / "spans.jsonl"
    provider = TracerProvider(resource=Resource.create({"service.name": "unit"}))
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(str(path))))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("outer") as outer, tracer.start_as_current_span("inner", attributes={"k": 1}):
        pass
    inner, outer_line = (json.loads(line) for line in path.read_text().splitlines())
    ids = outer.get_span_context()
    assert outer_line == {
        "name": "outer",
        "service": "unit",
        "trace_id": f"{ids.trace_id:032x}",
        "span_id": f"{ids.span_id:016x}",
        "parent_id": None,
        "kind": "INTERNAL",
        "status": "UNSET",
        "attributes": {},
    }
    assert inner["parent_id"] == outer_line["span_id"] and inner["trace_id"] == outer_line["trace_id"]
    assert inner["attributes"] == {"k": 1}
    provider.shutdown()


def test_an_expected_error_is_recorded_without_its_traceback_and_any_other_with_it(monkeypatch) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("test"))
    for exc in (KeyError("misuse"), ValueError("bug")):
        with contextlib.suppress(Exception), tracing.span("call", expected=(KeyError,)):
            raise exc
    misuse, bug = exported.get_finished_spans()
    assert [s.status.status_code for s in (misuse, bug)] == [StatusCode.ERROR, StatusCode.ERROR]
    assert [e.name for e in misuse.events] == ["exception"] == [e.name for e in bug.events]
    assert dict(misuse.events[0].attributes or {}) == {
        "exception.type": "builtins.KeyError",
        "exception.message": "'misuse'",
    }
    assert "Traceback" in (bug.events[0].attributes or {})["exception.stacktrace"]
    provider.shutdown()
