"""`run_service`, the start every entrypoint shares, in a real subprocess on a loopback port."""

from __future__ import annotations

import json

import httpx

from tests.support.service import running_service


def test_run_service_logs_json_from_the_build_on_and_shuts_down_gracefully() -> None:
    with running_service(["-m", "tests.support.plain_service", "--log-level", "INFO"]) as svc:
        assert httpx.get(f"{svc.url}/healthz").text == "ok"
        assert svc.stop() == -15  # uvicorn re-raises SIGTERM once it has shut down gracefully
        log = svc.log()
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    built = [e for e in events if e.get("event") == "plain.built"]
    assert built and built[0]["port"] == svc.port and built[0]["service"] == "plain", log
    assert any("Finished server process" in e.get("event", "") for e in events), log
