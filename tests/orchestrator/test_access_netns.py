"""No SSRF through client-named MCP servers: every refused address form, in a network namespace with only `lo`.

`netns_probe.py` runs under `unshare -n -m` (root): `lo` gets private, metadata and one "public"
address, /etc/hosts is a bind-mounted file naming them, and wildcard listeners count every connection.
Nothing can leave the machine even if a guard fails; a failed guard shows up as a connection count.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from netns_probe import ACCEPTED, HOSTS, LO_ADDRESSES, PUBLIC, REFUSED

HERE = Path(__file__).resolve().parent


def _setup_script(hosts_file: str) -> str:
    adds = [f"ip addr add {a}/{128 if ':' in a else 32} dev lo" for a in LO_ADDRESSES]
    return "; ".join(
        [
            "set -e",
            "ip link set lo up",
            *adds,
            f"mount --bind {hosts_file} /etc/hosts",
            f"exec {sys.executable} {HERE / 'netns_probe.py'}",
        ]
    )


@pytest.fixture(scope="module")
def probe() -> dict[str, Any]:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs root, unshare and ip (iproute2) for a network namespace")
    with tempfile.NamedTemporaryFile("w", prefix="toolfleet-hosts-", suffix=".txt") as hosts:
        hosts.write("127.0.0.1 localhost\n::1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in HOSTS))
        hosts.flush()
        args = ["unshare", "-n", "-m", "sh", "-c", _setup_script(hosts.name)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_PROXY": "*"})
    if proc.returncode != 0:
        raise RuntimeError(f"netns probe failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print("refusal times (s):", {n: c["elapsed_s"] for n, c in result["cases"].items()})
    return result


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_every_refused_or_unreachable_server_url_gets_the_uniform_400(probe, name):
    case = probe["cases"][name]
    assert case["status"] == 400, case
    assert case["body"] == {
        "error": {
            "message": "MCP server 't' is not available: its server_url is not allowed or did not answer",
            "type": "invalid_request_error",
            "param": "tools",
            "code": "mcp_server_unavailable",
        }
    }


def test_no_refused_address_received_a_connection(probe):
    """Only the public address was reached (by the cases that passed the address check on purpose)."""
    assert set(probe["counts"]) <= {PUBLIC}, probe["counts"]
    assert probe["counts"].get(PUBLIC) == 1  # public-not-mcp: the one accepted address with a listener on P


def test_a_redirect_from_a_public_server_to_loopback_is_not_followed(probe):
    assert probe["cases"]["public-redirect-to-loopback"]["status"] == 400
    assert not {a for a in probe["counts"] if a != PUBLIC}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_a_public_server_is_listed_and_called_at_the_checked_address_with_its_own_host_header(probe, name):
    case = probe["cases"][name]
    assert case["status"] == 200 and case["output"].startswith("Sunny in Oslo"), case
    reached = probe["public_requests"]
    assert reached and {r["server"] for r in reached} == {PUBLIC}
    port = probe["mcp_port"]
    assert {r["host"] for r in reached} == {f"public.test:{port}", f"{PUBLIC}:{port}", f"pin.test:{port}"}


def test_a_pinned_client_reaches_the_checked_address_even_where_the_name_resolves_elsewhere(probe):
    assert probe["pinned"] == {"status": 200, "listed": "weather"}  # pin.test is 127.0.0.1: nothing on that port
    assert {"server": PUBLIC, "host": f"pin.test:{probe['mcp_port']}"} in probe["public_requests"]


def test_allowlist_mode_admits_only_listed_urls_even_private_ones(probe):
    assert probe["cases"]["allowlist-listed-private"]["status"] == 200
    assert probe["cases"]["allowlist-listed-private"]["output"].startswith("Sunny")
    assert probe["cases"]["allowlist-unlisted-public"]["status"] == 400
    assert probe["private_requests"] and {r["server"] for r in probe["private_requests"]} == {"10.0.0.5"}


def test_gateway_only_mode_admits_the_gateways_namespaces_alone(probe):
    cases = probe["cases"]
    assert cases["gateway-only-by-label"]["status"] == 200 and cases["gateway-only-fronted-url"]["status"] == 200
    assert cases["gateway-only-other-path"]["status"] == 400 and cases["gateway-only-public"]["status"] == 400


def test_every_refusal_has_the_same_body_whatever_the_reason(probe):
    refused = [c for c in probe["cases"].values() if c["status"] != 200]
    assert len(refused) == len(REFUSED) + 3
    assert all(c["body"] == refused[0]["body"] for c in refused)
