"""One real Chroma server (`chroma run`, from the pinned `chromadb` of `deploy/scripts/setup_chroma.sh`) for the
file_search tool's `chroma` vector engine.

    with chroma_server(tmp_path / "chroma") as url:      # http://127.0.0.1:PORT, once /api/v2/heartbeat answers
        ...
    with chroma_server(same_path, port=same_port):       # the same server back, its data kept

The venv is installed on first use (`.cache/chroma`, ~2 min on a bare machine; a stamp check afterwards). The
server is always killed, failures included; the data directory is the caller's to remove.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.asgi import free_port
from tests.support.service import wait_healthy

SETUP = Path(__file__).resolve().parents[2] / "deploy" / "scripts" / "setup_chroma.sh"


def chroma_binary() -> Path:
    """The `chroma` executable of the pinned venv, installed first where it is missing."""
    proc = subprocess.run(["bash", str(SETUP)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{SETUP} failed:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def chroma_server(path: Path, port: int | None = None, binary: Path | None = None) -> Iterator[str]:
    port = port or free_port()
    args = [str(binary or chroma_binary()), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    fd, name = tempfile.mkstemp(prefix="toolfleet-test-chroma-", suffix=".log")
    log_path = Path(name)
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log_path, 60, path="/api/v2/heartbeat", what="chroma")
        yield url
    finally:
        proc.kill()
        proc.wait(10)
        log_path.unlink(missing_ok=True)


class Chroma:
    """A Chroma server a test can stop and start again where it was (same port, same data)."""

    def __init__(self, path: Path) -> None:
        self.path, self.port, self.binary = path, free_port(), chroma_binary()
        self.url = f"http://127.0.0.1:{self.port}"
        self._running = contextlib.ExitStack()

    def start(self) -> None:
        self._running.enter_context(chroma_server(self.path, self.port, self.binary))

    def stop(self) -> None:
        self._running.close()
