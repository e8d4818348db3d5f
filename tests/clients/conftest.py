"""Real third-party clients against the fleet: the orchestrator (scripted worker, a labelled stand-in for the
model's choices), the real gateway, the real python tool server, and the fixture browser and container.

The clients are installed once, pinned, by `deploy/scripts/setup_clients.sh` into `.cache/clients`
(`TOOLFLEET_CLIENTS_DIR` overrides it): a venv with the Python clients, and `@openai/codex` from npm.
Python clients run as subprocesses of that venv (`run_python`), Codex as its own binary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.worker.scripted import ChatScenario, ScriptedChatModel, build_chat_app
from tests.orchestrator.conftest import make_stack, scripted, tool_urls  # noqa: F401
from tests.orchestrator.test_fleet import gateway_url  # noqa: F401
from tests.support.asgi import serve_asgi

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "deploy" / "scripts" / "setup_clients.sh"


@dataclass(frozen=True)
class Clients:
    python: Path  # the clients' venv interpreter
    codex: Path


@pytest.fixture(scope="session")
def clients() -> Clients:
    """The pinned clients (installed on first use, ~1.5 min; a stamp check afterwards)."""
    target = Path(os.environ.get("TOOLFLEET_CLIENTS_DIR") or ROOT / ".cache" / "clients")
    started = time.monotonic()
    proc = subprocess.run(["bash", str(SETUP), str(target)], capture_output=True, text=True, timeout=900)
    print(proc.stdout, proc.stderr, file=sys.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{SETUP} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    print(f"[clients] ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return Clients(target / "venv" / "bin" / "python", target / "npm" / "node_modules" / ".bin" / "codex")


@pytest.fixture(scope="session")
def chat_worker() -> Iterator[ScriptedChatModel]:
    """A scripted chat-template worker (model `scripted-chat`), beside the scripted Harmony one."""
    model = ScriptedChatModel()
    with serve_asgi(build_chat_app(model)) as url:
        model.url = url  # type: ignore[attr-defined]
        yield model


@pytest.fixture
def fleet(make_stack, gateway_url, scripted, chat_worker):  # noqa: F811
    """The orchestrator with every tool behind the real gateway, a Harmony worker first and a chat worker."""
    url, _, _ = gateway_url
    chat_worker.scenario = ChatScenario()
    stack = make_stack(
        worker_urls=[scripted[0], chat_worker.url], tools_url=url, python_url=None, browser_url=None, container_url=None
    )
    stack.chat = chat_worker  # type: ignore[attr-defined]
    return stack


def chat_script(model: ScriptedChatModel, rules: list[tuple[str, dict]]) -> None:
    model.scenario = ChatScenario.from_dict({"rules": [{"match": m, "reply": r} for m, r in rules]})


def run_python(clients: Clients, code: str, base_url: str, timeout: float = 120, **env_vars: str) -> dict:
    """`code` run by the clients' interpreter with `BASE_URL`; its last stdout line is the JSON it printed."""
    return json.loads(run_script(clients, code, base_url, timeout, **env_vars).strip().splitlines()[-1])


def run_script(clients: Clients, code: str, base_url: str, timeout: float = 120, **env_vars: str) -> str:
    """`code` run by the clients' interpreter with `BASE_URL` (and the openai SDK's variables): its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(
        BASE_URL=base_url,
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="test-key",
        OPENAI_AGENTS_DISABLE_TRACING="1",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        **env_vars,
    )
    proc = subprocess.run([str(clients.python), "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, f"client failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout


@pytest.fixture
def codex_provider() -> dict[str, str | bool]:
    """Keys for Codex's `[model_providers.fleet]` table over the defaults below; tests parametrize it."""
    return {}


@pytest.fixture
def codex(clients, fleet, tmp_path, codex_provider) -> Iterator:
    """`codex(*args)` runs `codex exec` with its default config, pointed at the fleet, in a scratch directory."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    provider = {
        "name": "fleet",
        "base_url": f"{fleet.url}/v1",
        "wire_api": "responses",
        "env_key": "FLEET_API_KEY",
        **codex_provider,
    }
    table = "".join(f"{key} = {json.dumps(value)}\n" for key, value in provider.items())  # TOML's form too
    (home / "config.toml").write_text(
        f'model = "scripted-gpt-oss"\nmodel_provider = "fleet"\n\n[model_providers.fleet]\n{table}'
    )
    env = {**os.environ, "CODEX_HOME": str(home), "FLEET_API_KEY": "test-key", "NO_COLOR": "1"}

    def run(*args: str, timeout: float = 120) -> list[dict]:
        cmd = [str(clients.codex), "exec", *args]
        proc = subprocess.run(
            cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        assert proc.returncode == 0, f"codex failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        run.stderr = proc.stderr  # type: ignore[attr-defined]
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    run.work = work  # type: ignore[attr-defined]
    yield run
