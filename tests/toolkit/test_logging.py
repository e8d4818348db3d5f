"""Service logging: one JSON object per kept event on stderr; an event below the level leaves nothing."""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path

import pytest
import structlog

from toolkit.logging import configure_logging, iso_utc


@pytest.fixture
def restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def test_events_below_the_level_leave_nothing_and_kept_ones_are_json(
    restore_logging: object, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("WARNING", service="probe")
    log = structlog.get_logger("probe.module")
    log.info("tool.call", ms=1.0)
    log.warning("loop.slow", ms=2.0)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["event"] for line in lines] == ["loop.slow"]
    assert lines[0] | {"timestamp": None} == {
        "event": "loop.slow",
        "ms": 2.0,
        "service": "probe",
        "level": "warning",
        "logger": "probe.module",
        "timestamp": None,
    }


def test_the_timestamp_is_written_as_structlogs_iso_utc_stamper_writes_it() -> None:
    """structlog's stamper writes `datetime.isoformat()`: microseconds floored, none when they are 0, `Z`."""
    for ns in (
        0,
        1_765_000_000_000_000_000,
        1_765_000_000_999_999_999,
        1_765_000_001_000_000_999,
        1_765_000_001_000_123_456,
    ):
        expected = datetime.datetime.fromtimestamp(ns // 10**9, tz=datetime.UTC).replace(microsecond=ns // 1000 % 10**6)
        assert iso_utc(ns) == expected.isoformat().replace("+00:00", "Z")


def test_a_line_is_rendered_as_structlogs_json_renderer_renders_it(
    restore_logging: object, capsys: pytest.CaptureFixture[str]
) -> None:
    class Told:
        def __structlog__(self) -> str:
            return "told"

    event = {"event": "tool.call", "ms": 1.5, "path": Path("/tmp/x"), "told": Told(), "ids": (1, 2), "é": "ü"}
    configure_logging("INFO", service="probe")
    structlog.get_logger("probe").info(**event)
    line = capsys.readouterr().err.strip()
    expected = structlog.processors.JSONRenderer()(None, "", dict(event))
    assert json.loads(line) | {"timestamp": None} == json.loads(expected) | {
        "service": "probe",
        "level": "info",
        "logger": "probe",
        "timestamp": None,
    }
    assert '"path": "PosixPath(\'/tmp/x\')", "told": "told", "ids": [1, 2], "\\u00e9": "\\u00fc"' in line
