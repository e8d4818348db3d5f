"""The orchestrator through the real gateway, with the real python tool server (local bubblewrap backend), which
keeps snapshots in a dir store: a test may restart it with SIGTERM."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PY_CALL = "<|channel|>analysis to=python<|message|>{code}<|call|>"
KEEP_FILE = "open('/mnt/data/kept.txt', 'w').write('on disk')"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _process(args: list[str], health: str):
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{args[1]} exited: {proc.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health, timeout=1).status_code < 500:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args[1]} did not become healthy")
            time.sleep(0.1)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def gateway_url(tool_urls, tmp_path_factory):
    """The gateway's URL, the python server's port, and a restart of that server (SIGTERM, then again)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is needed for the python server's local backend")
    py_port, gw_port = _port(), _port()
    store = tmp_path_factory.mktemp("snapshots")
    python = ["-m", "tools.python_sandbox", "--backend", "local", "--port", str(py_port), "--drain-s", "1"]
    python += ["--snapshots", "dir", "--snapshot-dir", str(store)]
    py_health = f"http://127.0.0.1:{py_port}/healthz"
    config = tmp_path_factory.mktemp("gw") / "routes.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "namespaces": {
                    # the python server reads its dir store again once restarted: its sessions may move back to
                    # it whether or not the gateway heard it drain (restore_lost)
                    "python": {"replicas": [f"http://127.0.0.1:{py_port}/mcp"], "restore_lost": True},
                    "browser": {"replicas": [tool_urls["browser"]]},
                    "container": {"replicas": [tool_urls["container"]]},
                },
                "health": {"interval_s": 0.5},
            }
        )
    )
    with (
        contextlib.ExitStack() as python_server,
        _process(
            ["-m", "gateway", "--port", str(gw_port), "--config", str(config)], f"http://127.0.0.1:{gw_port}/healthz"
        ),
    ):
        python_server.enter_context(_process(python, py_health))

        def restart() -> None:
            python_server.close()  # SIGTERM: the server drains, saving its sessions to the store
            python_server.enter_context(_process(python, py_health))

        yield f"http://127.0.0.1:{gw_port}", py_port, restart


def test_real_python_through_the_gateway_keeps_state_across_the_chain(make_stack, gateway_url):
    url, _, _ = gateway_url
    stack = make_stack(tools_url=url, python_url=None, browser_url=None, container_url=None)
    stack.script(
        [
            ("python to=assistant.*\\b(42|43)\\b", "<|channel|>final<|message|>ok<|return|>"),
            ("first", PY_CALL.format(code="x = 6 * 7\nprint(x)")),
            ("second", PY_CALL.format(code="print(x + 1)")),
        ]
    )
    tools = [{"type": "code_interpreter"}]
    first = stack.client.responses.create(model="gpt-oss", input="first", tools=tools)
    assert first.output[0].type == "code_interpreter_call" and first.output[0].outputs[0].logs.strip() == "42"
    second = stack.client.responses.create(model="gpt-oss", input="second", tools=tools, previous_response_id=first.id)
    assert second.output[0].outputs[0].logs.strip() == "43"
    prompt = stack.model.encode_prompt_text(-1)
    assert "## python" in prompt  # the namespace description came from the server, through the gateway


def test_unstored_response_releases_its_python_session(make_stack, gateway_url):
    url, py_port, _ = gateway_url
    stack = make_stack(tools_url=url, python_url=None, browser_url=None, container_url=None)
    stack.script(
        [("python to=assistant", "<|channel|>final<|message|>ok<|return|>"), ("go", PY_CALL.format(code="print(1)"))]
    )
    before = httpx.get(f"http://127.0.0.1:{py_port}/healthz").json().get("sessions", 0)
    resp = stack.client.responses.create(model="gpt-oss", input="go", tools=[{"type": "code_interpreter"}], store=False)
    assert resp.output[0].status == "completed"
    assert httpx.get(f"http://127.0.0.1:{py_port}/healthz").json().get("sessions", 0) == before


def test_one_conversation_uses_python_browser_and_a_function_across_the_chain(make_stack, gateway_url):
    url, _, _ = gateway_url
    stack = make_stack(tools_url=url, python_url=None, browser_url=None, container_url=None)
    stack.script(
        [  # the most advanced state of the conversation first
            ("functions\\.get_weather to=assistant", "<|channel|>final<|message|>Sunny, and 42 it is.<|return|>"),
            (
                "†Tea facts†example.com",
                '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
            ),
            (
                "python to=assistant",
                '<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query": "tea"}<|call|>',
            ),
            ("plan a trip", PY_CALL.format(code="answer = 6 * 7\nprint(answer)")),
        ]
    )
    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    tools = [{"type": "code_interpreter", "container": {"type": "auto"}}, {"type": "web_search_preview"}, weather]
    first = stack.client.responses.create(model="gpt-oss", input="plan a trip", tools=tools)
    kinds = [item.type for item in first.output if item.type != "reasoning"]
    assert kinds == ["code_interpreter_call", "web_search_call", "function_call"]
    assert first.output[0].outputs[0].logs.strip() == "42"
    call = first.output[-1]
    assert call.name == "get_weather" and call.arguments == '{"city": "Paris"}'
    second = stack.client.responses.create(
        model="gpt-oss",
        tools=tools,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.output_text == "Sunny, and 42 it is."
    prompt = stack.model.encode_prompt_text(-1)
    assert "print(answer)" in prompt and "†Tea facts†example.com" in prompt and "sunny" in prompt  # the whole chain


def test_a_conversations_variable_and_file_survive_the_python_servers_sigterm_restart(make_stack, gateway_url):
    url, _, restart = gateway_url
    stack = make_stack(tools_url=url, python_url=None, browser_url=None, container_url=None)
    stack.script(
        [  # the stand-in model answers differently once it reads the restore notice in the tool's output
            ("restored from a snapshot of", "<|channel|>final<|message|>My state came back.<|return|>"),
            ("python to=assistant", "<|channel|>final<|message|>ok<|return|>"),
            ("keep", PY_CALL.format(code=f"kept = 6 * 7\n{KEEP_FILE}\nprint(kept)")),
            ("check", PY_CALL.format(code="print(kept, open('/mnt/data/kept.txt').read())")),
        ]
    )
    tools = [{"type": "code_interpreter"}]
    first = stack.client.responses.create(model="gpt-oss", input="keep", tools=tools)
    assert first.output[0].outputs[0].logs.strip() == "42" and first.output_text == "ok"
    restart()
    second = stack.client.responses.create(model="gpt-oss", input="check", tools=tools, previous_response_id=first.id)
    logs = second.output[0].outputs[0].logs
    assert logs.startswith("[restored from a snapshot of ") and logs.rstrip().endswith("\n42 on disk"), logs
    assert second.output_text == "My state came back."
