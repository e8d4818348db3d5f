"""The Kubernetes manifests validate offline against the 1.30 schemas and are wired to each other.

No cluster runs here: `kubernetes-validate --strict` checks every resource against the published schemas
(unknown fields rejected), and the wiring checks catch what a schema cannot: a Service selecting no pods,
a port name no container has, a gateway discovery name that is not a headless Service.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gateway.config import parse_config

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VERSION = "1.30.0"


def resources() -> list[dict]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str) -> dict[str, dict]:
    return {r["metadata"]["name"]: r for r in resources() if r["kind"] == kind}


@pytest.mark.parametrize("resource", resources(), ids=lambda r: f"{r['kind']}/{r['metadata']['name']}")
def test_each_resource_is_valid_against_the_kubernetes_schemas_strictly(resource) -> None:
    kubernetes_validate.validate(resource, VERSION, strict=True)


def test_a_broken_resource_is_rejected_so_the_check_can_fail() -> None:
    deployment = dict(by_kind("Deployment")["python"])
    broken = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSION, strict=True)


def test_every_service_selects_a_deployment_and_targets_a_named_port_of_it() -> None:
    deployments = by_kind("Deployment")
    for name, service in by_kind("Service").items():
        selector = service["spec"]["selector"]
        matches = [
            d for d in deployments.values() if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matches) == 1, f"Service {name} selects {len(matches)} Deployments"
        ports = {p["name"] for c in matches[0]["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, name


def test_the_gateway_discovers_each_tool_through_a_headless_service_on_its_port() -> None:
    routes = parse_config(by_kind("ConfigMap")["gateway-routes"]["data"]["gateway.yaml"])
    services = by_kind("Service")
    assert set(routes.namespaces) == {"browser", "python", "container", "file_search"}
    for ns, cfg in routes.namespaces.items():
        service = cfg.discover.dns.split(".")[0]
        assert services[service]["spec"].get("clusterIP") == "None", f"{service} must be headless"
        assert cfg.discover.port == services[service]["spec"]["ports"][0]["port"], ns


def test_only_the_orchestrator_takes_traffic_from_outside_the_fleet() -> None:
    policies = by_kind("NetworkPolicy")
    assert policies["default-deny"]["spec"]["podSelector"] == {}
    open_ingress = [
        name for name, p in policies.items() if any("from" not in rule for rule in p["spec"].get("ingress", []))
    ]
    assert open_ingress == ["orchestrator"]
    gateway_from = policies["gateway"]["spec"]["ingress"][0]["from"]
    assert gateway_from == [{"podSelector": {"matchLabels": {"app": "orchestrator"}}}]


def test_every_fleet_service_reads_the_one_fleet_secret() -> None:
    """The orchestrator signs the owner header with it and the gateway and tools check it: one Secret for all."""
    for name in ("orchestrator", "gateway", "browser", "python", "container", "file-search"):
        (container,) = by_kind("Deployment")[name]["spec"]["template"]["spec"]["containers"]
        assert {"secretRef": {"name": "toolfleet-fleet-secret"}} in container.get("envFrom", []), name
