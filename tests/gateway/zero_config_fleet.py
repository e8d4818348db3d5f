"""The fleet started by hand with no routing flags, on the default ports, inside a private network namespace.

Run by test_zero_config.py as `unshare -n sh -c 'ip link set lo up && exec python THIS'`: the namespace
has only its own loopback, so the fixed ports 8000/8080/8800-8803 belong to this run alone.
Starts the scripted worker (:8000), the real python tool (:8802, local backend), fixture MCP servers
named `browser` (:8801) and `container` (:8803), `toolfleet gateway` with no flags (:8800) and
`toolfleet orchestrator` with no worker or tools flags (:8080); then asks the gateway and the
orchestrator what a newcomer would, and prints the answers as one JSON line for the test to check.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.support.gateway import PY, REPO, call_text, connect, start_fixture, stop_process, wait_http

DEMO = REPO / "orchestrator" / "worker" / "scenarios" / "demo.yaml"


@contextlib.contextmanager
def service(logs: Path, name: str, args: list[str], health: str) -> Iterator[None]:
    with open(logs / f"{name}.log", "wb") as log:
        proc = subprocess.Popen([PY, "-m", *args], cwd=REPO, stdout=log, stderr=log)
    try:
        wait_http(health, timeout=90, proc=proc)
        yield
    finally:
        stop_process(proc)


async def ask() -> dict[str, object]:
    out: dict[str, object] = {}
    for ns in ("browser", "python", "container"):
        async with connect(f"http://127.0.0.1:8800/{ns}/mcp", "streamable-http") as client:
            assert client.server_info is not None
            tools = {t.name for t in (await client.list_tools()).tools}
            out[ns] = {"server": client.server_info.name, "tools": sorted(tools)}
            if "whoami" in tools:
                out[ns]["whoami"] = json.loads(await call_text(client, "whoami"))["replica"]  # type: ignore[index]
    async with httpx.AsyncClient(timeout=120, trust_env=False) as http:
        enabled = [{"type": "code_interpreter", "container": {"type": "auto"}}]
        body = {"input": "please compute six times seven", "tools": enabled}
        out["response"] = (await http.post("http://127.0.0.1:8080/v1/responses", json=body)).json()
    return out


def main() -> int:
    logs = Path(tempfile.mkdtemp(prefix="zero-config-"))
    with contextlib.ExitStack() as stack:
        for ns, port in (("browser", 8801), ("container", 8803)):
            up = start_fixture(f"{ns}-fixture", name=ns, port=port)
            stack.callback(stop_process, up.proc)
        stack.enter_context(
            service(
                logs,
                "worker",
                ["orchestrator.worker", "--scripted", "--scenario", str(DEMO)],
                "http://127.0.0.1:8000/health",
            )
        )
        stack.enter_context(
            service(logs, "python", ["tools.python_sandbox", "--backend", "local"], "http://127.0.0.1:8802/healthz")
        )
        stack.enter_context(service(logs, "gateway", ["gateway"], "http://127.0.0.1:8800/readyz"))
        stack.enter_context(
            service(logs, "orchestrator", ["orchestrator", "--store-path", ":memory:"], "http://127.0.0.1:8080/healthz")
        )
        result = asyncio.run(ask())
    result["gateway_log"] = (logs / "gateway.log").read_text(errors="replace")
    shutil.rmtree(logs, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
