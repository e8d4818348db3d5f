"""The compose fleet with deploy/compose.gvisor.yaml: the demo request answered with every sandbox under gVisor.

The override is what README tells an operator to add; the test brings it up as they would (COMPOSE_FILE names
both files), sends the demo request through the openai SDK, and inspects the runtime of every container the
python and container replicas made: session sandboxes, the warm pool and the owner leases.
"""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response

from tests.deploy.fleet import DEMO_TOOLS, build_images, compose_fleet, docker
from tests.support.sandbox import assert_no_host_paths

pytestmark = pytest.mark.docker
GVISOR = {"COMPOSE_FILE": "compose.yaml:deploy/compose.gvisor.yaml"}


def test_the_demo_request_is_answered_with_every_sandbox_under_gvisor() -> None:
    if "runsc" not in docker("info", "-f", "{{json .Runtimes}}"):
        pytest.skip("the Docker engine has no runsc runtime (deploy/setup-host.sh gvisor registers it)")
    build_images("all")
    with compose_fleet(env=GVISOR) as fleet:
        client = fleet.openai()
        resp = client.responses.create(model="m", input="Run the fleet demo now.", tools=DEMO_TOOLS)
        kinds = {item.type for item in resp.output}
        assert resp.status == "completed" and {"web_search_call", "code_interpreter_call", "mcp_call"} <= kinds
        logs = " ".join(o.logs for i in resp.output if i.type == "code_interpreter_call" for o in i.outputs or [])
        assert "demo-checksum" in logs
        shell = next(item for item in resp.output if item.type == "mcp_call")
        assert shell.error is None and "uid=1000" in shell.output
        Response.model_validate(resp.model_dump())
        fleet.remember_owners()
        sandboxes = {
            cid
            for owner in fleet.instances
            for label in ("toolfleet.owner", "toolfleet.lease")
            for cid in docker("ps", "-q", "--filter", f"label={label}={owner}").split()
        }
        runtimes = {cid: docker("inspect", "-f", "{{.HostConfig.Runtime}}", cid).strip() for cid in sandboxes}
        roles = {json.loads(docker("inspect", "-f", "{{json .Config.Labels}}", c))["toolfleet.role"] for c in sandboxes}
        assert {"python-sandbox", "container-sandbox", "lease"} <= roles, roles
        assert set(runtimes.values()) == {"runsc"}, runtimes
        one = next(c for c in sandboxes if "python" in docker("inspect", "-f", "{{.Config.Image}}", c))
        assert_no_host_paths(docker("exec", one, "cat", "/proc/self/mountinfo"))
