"""Service logging: one JSON object per kept event on stderr; an event below the level leaves nothing."""

from __future__ import annotations

import json
import logging

import pytest
import structlog

from toolkit.logging import configure_logging


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
