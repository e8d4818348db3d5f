"""A real vLLM worker on the CPU for tests: the tiny gpt-oss model with dummy weights.

    from tests.support.vllm import running_vllm

    with running_vllm(tool_servers=["127.0.0.1:8800/browser"]) as base_url:   # "http://127.0.0.1:PORT"
        httpx.post(f"{base_url}/v1/completions", json={"model": served_model(base_url), "prompt": [200006], ...})

The first use runs `deploy/scripts/setup_vllm_cpu.sh` (~2 min and ~2.6 GB on a bare machine; a
no-op afterwards). Start-up takes 30-70 s and ~4.5 GB RSS, so share one worker per test session
(see `vllm_base_url` below). The worker's whole process group is killed when the block is left,
on failure too; its log goes to a temp file whose tail is in every start-up error.

For pytest, `vllm_worker` (session scope, yields a `VllmServer` with .base_url, .model, .rss() ...)
can be imported into a conftest.py: `from tests.support.vllm import vllm_worker  # noqa: F401`.

Environment: TOOLFLEET_VLLM_VENV, TOOLFLEET_VLLM_MODEL (directories, defaults under `.cache/`),
TOOLFLEET_VLLM_START_TIMEOUT (seconds, default 180).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from .asgi import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO_ROOT / "deploy" / "scripts" / "setup_vllm_cpu.sh"
DEFAULT_VENV = REPO_ROOT / ".cache" / "vllm-venv"
DEFAULT_MODEL = REPO_ROOT / ".cache" / "tiny-gpt-oss"

# Harmony token ids (o200k_harmony).
START, MESSAGE, END = 200006, 200008, 200007
CALL, RETURN = 200012, 200002
STOP_TOKEN_IDS = (CALL, RETURN)
# "<|start|>user<|message|>Hi<|end|><|start|>assistant": a Harmony prompt awaiting the assistant.
HELLO_PROMPT = [START, 1428, MESSAGE, 12194, END, START, 173781]


class VllmStartError(RuntimeError):
    """vLLM could not be set up or did not become healthy; the message holds its log's tail."""


def _log(msg: str) -> None:
    print(f"[vllm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def venv_dir() -> Path:
    return Path(os.environ.get("TOOLFLEET_VLLM_VENV") or DEFAULT_VENV)


def model_dir() -> Path:
    return Path(os.environ.get("TOOLFLEET_VLLM_MODEL") or DEFAULT_MODEL)


def ensure_vllm(venv: Path | None = None, model: Path | None = None) -> tuple[Path, Path]:
    """Run the (idempotent, flock-serialised) setup script; returns (venv python, model dir)."""
    venv, model = venv or venv_dir(), model or model_dir()
    py = venv / "bin" / "python"
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SETUP_SCRIPT), str(venv), str(model)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1800,
    )
    for line in proc.stdout.splitlines():
        print(line, file=sys.stderr)
    if proc.returncode != 0 or not py.exists() or not (model / "tokenizer.json").exists():
        raise VllmStartError(f"{SETUP_SCRIPT} failed ({proc.returncode}):\n{proc.stdout[-5000:]}")
    _log(f"setup ok in {time.monotonic() - start:.1f} s")
    return py, model


def vllm_env(model: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment vLLM CPU needs here (ENVIRONMENT.md), offline and without usage stats."""
    env = dict(os.environ if base is None else base)
    env.update(
        VLLM_TARGET_DEVICE="cpu",
        VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        DO_NOT_TRACK="1",
        TIKTOKEN_ENCODINGS_BASE=str(model / "encodings"),
        PYTHONUNBUFFERED="1",
    )
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):  # keep the test venv out of vLLM's
        env.pop(var, None)
    return env


DUMMY_WEIGHTS = ("--load-format", "dummy", "--max-model-len", "4096", "--dtype", "bfloat16")
"""How the generating test models load: random weights (they ship none), a 4k context, bf16."""


def vllm_command(
    python: Path,
    model: Path,
    port: int,
    tool_servers: Sequence[str] | None = None,
    extra_args: Sequence[str] = (),
    load: Sequence[str] = DUMMY_WEIGHTS,
) -> list[str]:
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *load,
        "--enforce-eager",  # no torch.compile warm-up: ~45 s less per start here, and the same outputs
    ]
    if tool_servers:
        cmd += ["--tool-server", ",".join(tool_servers)]
    return cmd + list(extra_args)


def log_tail(path: Path | str, lines: int = 60) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _group_members(pgid: int) -> list[tuple[int, str, int]]:
    """(pid, state, rss pages) of the processes in group `pgid`, from /proc."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(")") + 2 :].split()  # fields[0] state, fields[2] pgrp
            if int(fields[2]) == pgid:
                with open(f"/proc/{entry.name}/statm") as fh:
                    members.append((int(entry.name), fields[0], int(fh.read().split()[1])))
        except (OSError, ValueError, IndexError):
            continue
    return members


def process_group_rss(pgid: int) -> int:
    """Resident memory, in bytes, of every live process in the process group `pgid`."""
    return sum(pages for _, _, pages in _group_members(pgid)) * os.sysconf("SC_PAGE_SIZE")


def process_group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is still running (zombies do not count)."""
    return any(state != "Z" for _, state, _ in _group_members(pgid))


def kill_process_group(proc: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """SIGTERM the whole group, SIGKILL whatever is left after `grace_s`, reap the leader; never raises."""
    pgid = proc.pid  # started with start_new_session=True: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader as soon as it exits
        if not process_group_alive(pgid):
            break
        time.sleep(0.2)
    else:
        _log(f"process group {pgid} still alive {grace_s:.0f} s after SIGTERM; SIGKILL")
    # The engine core and workers may outlive the leader: always finish the whole group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while process_group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)


def served_model(base_url: str) -> str:
    """The model name that requests must use (the model directory's path unless renamed)."""
    data = httpx.get(f"{base_url}/v1/models", timeout=10).json()
    return data["data"][0]["id"]


def wait_healthy(base_url: str, proc: subprocess.Popen[Any], log_path: Path, timeout: float) -> float:
    """Poll `/health` until 200; returns the seconds waited. Raises VllmStartError on exit or timeout."""
    start = time.monotonic()
    next_note = 10.0
    with httpx.Client(timeout=2.0) as client:
        while True:
            elapsed = time.monotonic() - start
            if proc.poll() is not None:
                raise VllmStartError(
                    f"vLLM exited with {proc.returncode} after {elapsed:.0f} s; log {log_path}:\n{log_tail(log_path)}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{base_url}/health").status_code == 200:
                    return elapsed
            if elapsed > timeout:
                raise VllmStartError(f"vLLM not healthy after {timeout:.0f} s; log {log_path}:\n{log_tail(log_path)}")
            if elapsed >= next_note:
                last = log_tail(log_path, 1).strip()[:160]
                _log(f"waiting for {base_url}/health ({elapsed:.0f} s; log: {last})")
                next_note += 10.0
            time.sleep(0.5)


def warm_up(base_url: str, model: str, max_tokens: int = 8) -> float:
    """One small token-id completion (the first request compiles and allocates); returns seconds."""
    start = time.monotonic()
    resp = httpx.post(
        f"{base_url}/v1/completions",
        json={"model": model, "prompt": HELLO_PROMPT, "max_tokens": max_tokens, "temperature": 0},
        timeout=120,
    )
    resp.raise_for_status()
    return time.monotonic() - start


def stream_completion(base_url: str, model: str, prompt: list[int], **params: Any) -> list[dict[str, Any]]:
    """POST a streamed token-id `/v1/completions` and return its parsed SSE chunks (without [DONE]).

    `params` go into the body (max_tokens, temperature, seed, stop_token_ids, stream_options ...).
    Each chunk's `choices[0].token_ids` holds the new ids; raises if the stream does not end in [DONE].
    """
    body = {"model": model, "prompt": prompt, "stream": True, "return_token_ids": True, **params}
    chunks: list[dict[str, Any]] = []
    done = False
    with httpx.stream("POST", f"{base_url}/v1/completions", json=body, timeout=120) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            chunks.append(json.loads(data))
    if not done:
        raise AssertionError(f"stream ended without [DONE] after {len(chunks)} chunks")
    return chunks


@dataclass
class VllmServer:
    base_url: str
    model: str
    port: int
    proc: subprocess.Popen[Any]
    log_path: Path
    start_s: float = 0.0
    warmup_s: float = 0.0
    rss_bytes: int = 0
    command: list[str] = field(default_factory=list)

    def rss(self) -> int:
        return process_group_rss(self.proc.pid)

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)


@contextlib.contextmanager
def vllm_server(
    tool_servers: Sequence[str] | None = None,
    port: int | None = None,
    *,
    timeout: float | None = None,
    extra_args: Sequence[str] = (),
    warmup: bool = True,
    keep_log: bool = False,
    model: Path | None = None,
    load: Sequence[str] = DUMMY_WEIGHTS,
) -> Iterator[VllmServer]:
    """Start a vLLM CPU worker, wait for `/health`, warm it up, yield it, and always kill it.
    `model`: another model directory than the tiny gpt-oss (e.g. `tiny_chat_model`); no Harmony warm-up.
    `load`: how the weights load (a model with real weights, such as an embedding model, drops `DUMMY_WEIGHTS`)."""
    timeout = timeout or float(os.environ.get("TOOLFLEET_VLLM_START_TIMEOUT", "180"))
    python, gpt_oss = ensure_vllm()
    warmup = warmup and model is None
    model = model or gpt_oss
    port = port or free_port()
    base_url = f"http://127.0.0.1:{port}"
    cmd = vllm_command(python, model, port, tool_servers, extra_args, load)
    fd, log_name = tempfile.mkstemp(prefix=f"vllm-{port}-", suffix=".log")
    log_path = Path(log_name)
    _log(f"starting vLLM on {base_url} (log {log_path})")
    ok = False
    # vLLM leaves IPC sockets and dist files in its temp dir: give it one of its own, removed below.
    scratch = tempfile.mkdtemp(prefix=f"toolfleet-vllm-{port}-")
    with os.fdopen(fd, "wb") as log_fh:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            env={**vllm_env(model), "TMPDIR": scratch},
            cwd=scratch,
            start_new_session=True,  # its own process group, killed as one
        )
    try:
        start_s = wait_healthy(base_url, proc, log_path, timeout)
        server = VllmServer(base_url, str(model), port, proc, log_path, start_s=start_s, command=cmd)
        try:
            server.model = served_model(base_url)
            if warmup:
                server.warmup_s = warm_up(base_url, server.model)
        except httpx.HTTPError as exc:
            raise VllmStartError(f"vLLM warm-up failed: {exc!r}; log {log_path}:\n{log_tail(log_path)}") from exc
        server.rss_bytes = server.rss()
        _log(
            f"vLLM ready on {base_url} in {start_s:.1f} s (warm-up {server.warmup_s:.2f} s, "
            f"RSS {server.rss_bytes / 2**30:.2f} GiB)"
        )
        yield server
        ok = True
    finally:
        kill_process_group(proc)
        shutil.rmtree(scratch, ignore_errors=True)
        if ok and not keep_log:
            with contextlib.suppress(OSError):
                log_path.unlink()
        else:
            _log(f"vLLM log kept at {log_path}")


@contextlib.contextmanager
def running_vllm(tool_servers: list[str] | None = None, port: int | None = None, **kwargs: Any) -> Iterator[str]:
    """`vllm_server` yielding only the base URL, e.g. "http://127.0.0.1:PORT"."""
    with vllm_server(tool_servers, port, **kwargs) as server:
        yield server.base_url


CHAT_BUILD_SCRIPT = REPO_ROOT / "deploy" / "scripts" / "build_tiny_chat_model.py"
CHAT_SERVE_ARGS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--reasoning-parser",
    "qwen3",
    # JSON without free whitespace: random weights would otherwise spend any token budget between the values
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
)


@contextlib.contextmanager
def tiny_chat_model() -> Iterator[Path]:
    """A tiny Qwen3 chat model directory (random weights, offline tokenizer), built into a temp dir
    with the vLLM venv's python and removed afterwards; serve it with `CHAT_SERVE_ARGS`."""
    python, _ = ensure_vllm()
    out = Path(tempfile.mkdtemp(prefix="toolfleet-tiny-chat-"))
    try:
        proc = subprocess.run(
            [str(python), str(CHAT_BUILD_SCRIPT), "--out", str(out / "model")],
            capture_output=True,
            text=True,
            timeout=300,
            env=vllm_env(out),
        )
        if proc.returncode != 0:
            raise VllmStartError(f"{CHAT_BUILD_SCRIPT} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        yield out / "model"
    finally:
        shutil.rmtree(out, ignore_errors=True)


STRUCTURED_ARGS = ("--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}')
"""Structured decoding that a random-weight model cannot stall with endless whitespace (ENVIRONMENT.md)."""


@pytest.fixture(scope="session")
def vllm_worker() -> Iterator[VllmServer]:
    """One vLLM CPU worker for the whole test session (import this fixture into a conftest.py)."""
    with vllm_server(extra_args=STRUCTURED_ARGS) as server:
        yield server
