"""Zero configuration on one machine: every service started by hand on its default port finds the others."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from gateway.config import LOCAL_FLEET, local_fleet
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import Endpoints
from tests.support.gateway import PY, REPO

SCRIPT = REPO / "tests" / "gateway" / "zero_config_fleet.py"


def _netns_allowed() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


def test_without_a_routes_file_the_gateway_routes_the_built_in_tools_to_their_default_ports() -> None:
    routes = {name: ns.replicas for name, ns in local_fleet().namespaces.items()}
    assert routes == {ns: (f"http://127.0.0.1:{port}/mcp",) for ns, port in LOCAL_FLEET.items()}
    assert LOCAL_FLEET == {"browser": 8801, "python": 8802, "container": 8803}


def test_without_a_tools_url_the_orchestrator_uses_the_local_gateway_and_an_empty_one_turns_it_off() -> None:
    settings = OrchestratorSettings()
    assert Endpoints(settings.tools_url).url_for("python") == "http://127.0.0.1:8800/python/mcp"
    off = OrchestratorSettings.from_args(["--tools-url", ""], "toolfleet orchestrator")
    assert Endpoints(off.tools_url).url_for("python") is None


@pytest.mark.skipif(not _netns_allowed(), reason="needs unshare -n (root or user namespaces) and iproute2")
def test_the_fleet_started_with_no_routing_flags_answers_through_gateway_and_orchestrator() -> None:
    cmd = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$1"', PY, str(SCRIPT)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for ns in ("browser", "python", "container"):
        assert out[ns]["server"] == ns  # the gateway names each namespace after its route
    assert out["browser"]["whoami"] == "browser-fixture" and out["container"]["whoami"] == "container-fixture"
    assert "python" in out["python"]["tools"]  # the real python tool server
    logged = [json.loads(line) for line in out["gateway_log"].splitlines() if '"config.default"' in line]
    assert logged and logged[0]["routes"]["python"] == ["http://127.0.0.1:8802/mcp"]
    assert "--config" in logged[0]["message"]
    response = out["response"]
    assert response["status"] == "completed", response
    calls = [item for item in response["output"] if item["type"] == "code_interpreter_call"]
    assert calls and "42" in json.dumps(calls[0]["outputs"])  # print(6 * 7) ran in the real python tool
