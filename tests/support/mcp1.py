"""Drive MCP servers with the MCP 1.x Python SDK (`mcp<2`), which many third-party clients still use.

The project itself runs on `mcp` 2.x, so the 1.x SDK lives in its own venv (default
`.cache/mcp1-venv`, created on first use, shared by parallel test processes through a file lock)
and is driven as a subprocess:

    from tests.support.mcp1 import run_mcp1_client

    out = run_mcp1_client(url, [{"op": "list_tools"}, {"op": "call_tool", "name": "add", "arguments": {"a": 1}}])
    out["server_info"]["name"], out["results"][0]["tools"], out["results"][1]["result"]["content"][0]["text"]

`tests/support/mcp1_client.py` documents the operations and the output. From async tests use
`arun_mcp1_client` / `arun_mcp1_script`, so a server running in the test's own event loop is served
while the client runs.

Environment: `TOOLFLEET_MCP1_VENV` (venv dir), `TOOLFLEET_MCP1_SPEC` (pip requirement, default `mcp<2`).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO_ROOT / ".cache" / "mcp1-venv"
DEFAULT_SPEC = "mcp<2"
CLIENT_SCRIPT = Path(__file__).with_name("mcp1_client.py")
_STAMP = ".toolfleet-mcp1-stamp"
_READY: dict[tuple[str, str], Path] = {}  # (venv, spec) checked in this process


class Mcp1Error(RuntimeError):
    """The 1.x venv could not be set up, or a script in it failed or printed no JSON."""


def venv_dir() -> Path:
    return Path(os.environ.get("TOOLFLEET_MCP1_VENV") or DEFAULT_VENV)


def _spec() -> str:
    return os.environ.get("TOOLFLEET_MCP1_SPEC") or DEFAULT_SPEC


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _installed_version(py: Path) -> str | None:
    if not py.exists():
        return None
    proc = subprocess.run(
        [str(py), "-c", "import importlib.metadata as m, mcp.client.session; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure_mcp1_venv(venv: Path | str | None = None, *, spec: str | None = None) -> Path:
    """The python of a venv holding the MCP 1.x SDK; created and installed on first use (~10-20 s).

    Idempotent and safe to call from parallel processes: the work is done under a file lock and
    recorded in a stamp (the requirement spec), so later calls cost one `stat` and one `import`.
    """
    venv = Path(venv) if venv is not None else venv_dir()
    spec = spec or _spec()
    if (ready := _READY.get((str(venv), spec))) is not None and ready.exists():
        return ready
    py = _python(venv)
    stamp = venv / _STAMP
    with _file_lock(venv.parent / f"{venv.name}.lock"):
        if stamp.exists() and stamp.read_text().split("\n")[0] == spec and _installed_version(py):
            _READY[(str(venv), spec)] = py
            return py
        start = time.monotonic()
        print(f"[mcp1] creating {venv} with {spec!r}", file=sys.stderr, flush=True)
        base = getattr(sys, "_base_executable", None) or sys.executable
        steps = [
            [base, "-m", "venv", "--clear", str(venv)],
            [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--progress-bar", "off", spec],
        ]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise Mcp1Error(
                    f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
                )
        version = _installed_version(py)
        if not version or not version.startswith("1."):
            raise Mcp1Error(f"{venv}: expected an mcp 1.x install, found {version!r}")
        stamp.write_text(f"{spec}\n{version}\n")
        _READY[(str(venv), spec)] = py
        print(f"[mcp1] mcp {version} ready in {time.monotonic() - start:.1f} s", file=sys.stderr, flush=True)
        return py


def mcp1_version(venv: Path | str | None = None) -> str:
    """The installed 1.x SDK version (installs the venv when needed)."""
    return _installed_version(ensure_mcp1_venv(venv)) or "?"


def _parse(cmd: Sequence[str], rc: int, stdout: str, stderr: str, check: bool = True) -> Any:
    if rc != 0 and (check or not stdout.strip()):
        raise Mcp1Error(
            f"{' '.join(cmd)} exited {rc}\n--- stdout ---\n{stdout[-4000:]}\n--- stderr ---\n{stderr[-4000:]}"
        )
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise Mcp1Error(f"{' '.join(cmd)} printed nothing\n--- stderr ---\n{stderr[-4000:]}")
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        try:
            return json.loads(lines[-1])  # tolerate chatter before a last JSON line
        except json.JSONDecodeError as exc:
            raise Mcp1Error(f"{' '.join(cmd)} printed no JSON: {stdout[-2000:]!r}") from exc


def run_mcp1_script(
    script: Path | str,
    args: Sequence[str] = (),
    *,
    timeout: float = 60,
    input: str | None = None,
    venv: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> Any:
    """Run `script` with the 1.x venv's python and return its stdout parsed as JSON (blocking).

    With `check=False` a non-zero exit still returns the JSON the script printed (if any).
    """
    py = ensure_mcp1_venv(venv)
    cmd = [str(py), str(script), *args]
    try:
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
    except subprocess.TimeoutExpired as exc:
        raise Mcp1Error(f"{' '.join(cmd)} timed out after {timeout} s; stderr: {exc.stderr!r}") from exc
    return _parse(cmd, proc.returncode, proc.stdout, proc.stderr, check)


async def arun_mcp1_script(
    script: Path | str,
    args: Sequence[str] = (),
    *,
    timeout: float = 60,  # noqa: ASYNC109 - same signature as run_mcp1_script
    input: str | None = None,
    venv: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
) -> Any:
    """`run_mcp1_script` for async tests: the event loop keeps running while the client works."""
    py = await anyio.to_thread.run_sync(ensure_mcp1_venv, venv)
    cmd = [str(py), str(script), *args]
    with anyio.fail_after(timeout):
        proc = await anyio.run_process(
            cmd, input=input.encode() if input is not None else None, check=False, env={**os.environ, **(env or {})}
        )
    return _parse(cmd, proc.returncode, proc.stdout.decode(), proc.stderr.decode(), check)


def _client_args(url: str, transport: str, headers: Mapping[str, str] | None, timeout: float) -> list[str]:
    if transport not in ("sse", "streamable-http"):
        raise ValueError(f"transport must be 'sse' or 'streamable-http', not {transport!r}")
    args = ["--url", url, "--transport", transport, "--timeout", str(timeout)]
    for key, value in (headers or {}).items():
        args += ["--header", f"{key}={value}"]
    return args


def run_mcp1_client(
    url: str,
    ops: Sequence[Any],
    *,
    transport: str = "streamable-http",
    headers: Mapping[str, str] | None = None,
    timeout: float = 60,
    check: bool = True,
) -> dict[str, Any]:
    """Run `mcp1_client.py` against `url` with the operations `ops`; returns its JSON output.

    A failure to connect raises `Mcp1Error`, or with `check=False` returns `{"error": {...}, "results": []}`.
    Failed operations never raise: their result has `"ok": false` and an `"error"`.
    """
    args = _client_args(url, transport, headers, timeout)
    return run_mcp1_script(CLIENT_SCRIPT, args, input=json.dumps(list(ops)), timeout=timeout + 30, check=check)


async def arun_mcp1_client(
    url: str,
    ops: Sequence[Any],
    *,
    transport: str = "streamable-http",
    headers: Mapping[str, str] | None = None,
    timeout: float = 60,  # noqa: ASYNC109 - same signature as run_mcp1_client
    check: bool = True,
) -> dict[str, Any]:
    """`run_mcp1_client` for async tests."""
    args = _client_args(url, transport, headers, timeout)
    return await arun_mcp1_script(CLIENT_SCRIPT, args, input=json.dumps(list(ops)), timeout=timeout + 30, check=check)
