"""Run a toolfleet service as a real subprocess on a loopback port, and always stop it.

    with running_service(["-m", "tools.python_sandbox", "--backend", "local"]) as svc:
        svc.url            # "http://127.0.0.1:PORT"

The port is chosen here and passed as `--port`; the block is entered once `/healthz` answers.
On exit the process group gets SIGTERM (graceful shutdown), then SIGKILL after a grace period.
The log is kept in a temp file; its tail is attached to start-up failures.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.asgi import free_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    url: str
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 15.0) -> int:
        """Signal the process group and wait; SIGKILL when it does not stop in time."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode


def wait_healthy(
    url: str,
    proc: subprocess.Popen[bytes],
    log_path: Path,
    timeout_s: float,
    *,
    path: str = "/healthz",
    what: str = "service",
) -> None:
    """Until `url` + `path` answers 200; the process's log in the error when it exits or never answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}{path}", timeout=1).status_code == 200:
                return
        time.sleep(0.1)
    raise TimeoutError(f"{what} not healthy after {timeout_s} s:\n{log_path.read_text()[-4000:]}")


@contextlib.contextmanager
def running_service(
    args: Sequence[str], *, port: int | None = None, env: dict[str, str] | None = None, timeout_s: float = 60
) -> Iterator[Service]:
    port = port or free_port()
    fd, name = tempfile.mkstemp(prefix="toolfleet-test-", suffix=".log")
    log_path = Path(name)
    with os.fdopen(fd, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, *args, "--port", str(port)],
            cwd=REPO,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    service = Service(proc, f"http://127.0.0.1:{port}", port, log_path)
    try:
        wait_healthy(service.url, proc, log_path, timeout_s)
        yield service
    finally:
        service.stop()
        log_path.unlink(missing_ok=True)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Poll `predicate` every 0.1 s until it holds or `timeout_s` passes; its last answer (for an assert)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()
