"""structlog JSON logging, configured once by each service entrypoint.

Our own events and every stdlib logger (uvicorn, the MCP SDK, httpx) leave as one JSON object per
line on stderr, with the bound context (service, namespace, session and request ids) and the current trace id.
Our events are rendered by structlog and written straight to stderr: routed through the stdlib (a LogRecord,
the handler's lock, the formatter's copy of the event) one line cost 42 us, several per cent of a tool call.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from typing import Any

import structlog
from structlog.typing import EventDict

from toolkit.tracing import trace_ids


@functools.lru_cache(maxsize=2)
def _whole_second(second: int) -> str:
    """A second's text, formatted once for all the lines stamped within it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def iso_utc(ns: int) -> str:
    """An instant (ns since the epoch) as structlog's `TimeStamper(fmt="iso", utc=True)` writes it, which is
    `datetime.isoformat()`'s: microseconds floored, left out when they are 0, and `Z` for UTC."""
    second, micro = divmod(ns // 1000, 1_000_000)
    return f"{_whole_second(second)}.{micro:06d}Z" if micro else f"{_whole_second(second)}Z"


def _timestamp(_logger: Any, _name: str, event: EventDict) -> EventDict:
    """structlog processor: the line's `timestamp`, under half the cost of structlog's own stamper."""
    event["timestamp"] = iso_utc(time.time_ns())
    return event


def _fallback(value: Any) -> Any:
    """What a value JSON cannot write becomes, as structlog's `JSONRenderer` has it: its `__structlog__()`, else
    its repr."""
    try:
        return value.__structlog__()
    except AttributeError:
        return repr(value)


_ENCODER = json.JSONEncoder(default=_fallback)
"""Made once: `json.dumps` with a `default` (structlog's renderer) builds an encoder per line."""


def _json(_logger: Any, _name: str, event: EventDict) -> str:
    """structlog processor: the line, as `JSONRenderer()` renders it."""
    return _ENCODER.encode(event)


_SHARED: list[structlog.typing.Processor] = [
    structlog.contextvars.merge_contextvars,
    trace_ids,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    _timestamp,
]


def _skip_unshown_record_fields() -> None:
    """No line shows a record's caller, thread or process, so the stdlib need not look them up for every record
    (the logging HOWTO's "Optimization"): the caller's frame walk was the largest part of a kept event's cost."""
    logging._srcfile = None  # the HOWTO's documented switch
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


class _NamedWriter(structlog.WriteLogger):
    """structlog's stderr writer with the name `get_logger(__name__)` gave it, for the `logger` field."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(sys.stderr)
        self.name = name or "root"


def configure_logging(level: str = "INFO", *, service: str) -> None:
    _skip_unshown_record_fields()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_SHARED,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                _json,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    structlog.configure(
        # An event below the level is dropped by the bound logger's method, before anything is formatted.
        processors=[*_SHARED, structlog.processors.format_exc_info, _json],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=_NamedWriter,
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
