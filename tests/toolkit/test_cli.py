"""The `toolfleet` CLI dispatches to each service's `python -m` entrypoint."""

from __future__ import annotations

import subprocess
import sys

from toolkit.cli import main


def test_help_lists_every_service(capsys) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("python", "gateway", "orchestrator", "worker"):
        assert f"  {name}" in out


def test_unknown_service_is_a_clear_error(capsys) -> None:
    assert main(["nope"]) == 2
    assert "unknown service 'nope'" in capsys.readouterr().err


def test_service_flags_are_also_environment_variables() -> None:
    out = subprocess.run([sys.executable, "-m", "toolkit.cli", "python", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--pool-size" in out.stdout and "--session-ttl-s" in out.stdout
    code = (
        "from tools.python_sandbox.settings import PythonSandboxSettings as S;"
        "print(S.from_args(['--timeout-s', '9'], 'x').pool_size, S.from_args([], 'x').timeout_s)"
    )
    env = {"TOOLFLEET_PYTHON_POOL_SIZE": "7", "TOOLFLEET_PYTHON_TIMEOUT_S": "12", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["7", "12.0"], out.stderr
