"""Settings every test process inherits.

A tool server stopped by a test drains for `--drain-s` (10 s by default) while the sessions a test left open are
held, then removes its sandboxes; the harness kills it after 15 s, which under gVisor could leave containers behind.
One second of drain keeps every stop short; tests of the drain itself pass `--drain-s`, which beats the env."""

import os
from collections.abc import Callable

import pytest

os.environ.setdefault("TOOLFLEET_DRAIN_S", "1")


@pytest.fixture(scope="session")
def report(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """Print a measured figure into the run's output even without `-s` (the chaos table, the swarm's recovery
    times), so a CI log keeps what the closing notes quote."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def emit(text: str) -> None:
        with capture.global_and_fixture_disabled():
            print(text, flush=True)

    return emit
