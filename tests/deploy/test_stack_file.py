"""The swarm stack file is compose.yaml with the compose-only keys dropped and deploy/swarm.yaml merged in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.deploy.fleet import REPO

SCRIPT = REPO / "deploy" / "scripts" / "swarm_stack.py"
sys.path.insert(0, str(SCRIPT.parent))
import swarm_stack  # noqa: E402


def stack() -> dict:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    return swarm_stack.stack(compose, yaml.safe_load((REPO / "deploy" / "swarm.yaml").read_text()))


def test_compose_only_keys_are_dropped_and_tmpfs_becomes_per_task_volumes() -> None:
    services = stack()["services"]
    assert set(services) == set(yaml.safe_load((REPO / "compose.yaml").read_text())["services"])
    for spec in services.values():
        assert not set(swarm_stack.COMPOSE_ONLY) & set(spec)
    mounts = [v for v in services["browser"]["volumes"] if isinstance(v, dict)]
    assert {"type": "volume", "target": "/srv/index"} in mounts  # owned like the image's directory


def test_every_service_reads_the_one_fleet_secret_file_by_its_absolute_path() -> None:
    """The stack file is written outside the repository: a relative env_file would name another file."""
    secret = str(REPO / "deploy" / "fleet-secret.env")
    assert all(spec["env_file"] == [secret] for spec in stack()["services"].values())


def test_the_swarm_overrides_win_and_the_rest_is_kept() -> None:
    s = stack()
    assert s["services"]["gateway"]["environment"]["TOOLFLEET_DNS_PREFIX"] == "tasks."
    assert s["services"]["python"]["deploy"]["replicas"] == 2
    assert s["services"]["python"]["deploy"]["update_config"]["order"] == "start-first"
    assert s["services"]["vllm"]["deploy"]["replicas"] == 0  # profiles do not exist on a swarm
    assert s["services"]["orchestrator"]["ports"][0]["mode"] == "host"
    assert all(spec["deploy"]["endpoint_mode"] == "dnsrr" for spec in s["services"].values())
    assert s["services"]["python"]["read_only"] is True and s["networks"]["fleet"]["internal"] is True
    # python sessions move between tasks through snapshots in the fleet's Redis, which every node reads
    assert s["services"]["python"]["environment"]["TOOLFLEET_PYTHON_SNAPSHOTS"] == "redis"
    assert s["services"]["python"]["environment"]["TOOLFLEET_PYTHON_POOL_SIZE"] == "1"  # compose's kept


def test_files_the_repository_mounts_become_swarm_configs_every_node_receives() -> None:
    s = stack()
    (mount,) = s["services"]["gateway"]["configs"]
    assert mount["target"] == "/etc/toolfleet/gateway.yaml" and mount["mode"] == 0o444
    assert s["configs"][mount["source"]] == {"file": str(REPO / "deploy" / "gateway.yaml")}
    assert not any(isinstance(v, str) and v.startswith("./") for v in s["services"]["gateway"].get("volumes", []))
    # The engine socket stays a bind mount: each node's own engine.
    assert "/var/run/docker.sock:/var/run/docker.sock" in s["services"]["python"]["volumes"]


def test_a_changed_file_is_a_new_config(tmp_path) -> None:
    compose = {"services": {"gateway": {"image": "x", "volumes": ["./routes.yaml:/etc/routes.yaml:ro"]}}}
    keys = []
    for text in ("a: 1", "a: 2"):
        (tmp_path / "routes.yaml").write_text(text)
        keys.append(swarm_stack.stack(compose, base=tmp_path)["services"]["gateway"]["configs"][0]["source"])
    assert keys[0] != keys[1] and all(key.startswith("routes-") for key in keys)


def test_the_nodes_overlay_puts_the_core_on_managers_and_spreads_the_tools_over_workers() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    overlays = [yaml.safe_load((REPO / "deploy" / name).read_text()) for name in ("swarm.yaml", "swarm-nodes.yaml")]
    services = swarm_stack.stack(compose, *overlays)["services"]
    assert services["gateway"]["deploy"]["placement"]["constraints"] == ["node.role == manager"]
    assert services["gateway"]["deploy"]["endpoint_mode"] == "dnsrr"  # swarm.yaml's keys kept under the overlay
    tools = services["python"]["deploy"]
    assert tools["placement"]["preferences"] == [{"spread": "node.labels.toolfleet.zone"}] and tools["replicas"] == 2


def test_merge_merges_mappings_and_replaces_lists() -> None:
    merged = swarm_stack.merge({"a": {"x": 1, "y": [1]}, "b": 2}, {"a": {"y": [2], "z": 3}})
    assert merged == {"a": {"x": 1, "y": [2], "z": 3}, "b": 2}


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI")
def test_the_docker_cli_accepts_the_stack_file(tmp_path) -> None:
    subprocess.run(["bash", str(REPO / "deploy" / "scripts" / "fleet_secret.sh")], check=True)  # as swarm.sh does
    path = tmp_path / "stack.yaml"
    path.write_text(subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=True).stdout)
    out = subprocess.run(
        ["docker", "stack", "config", "-c", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "DOCKER_GID": "0", "TOOLFLEET_PORT": "18080"},
    )
    assert out.returncode == 0, out.stderr
    assert "published: 18080" in out.stdout
