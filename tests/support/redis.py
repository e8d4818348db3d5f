"""One real `redis-server` for the tests that need Redis (gateway pin tables, orchestrator stores)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
import redis

from tests.support.asgi import free_port


@contextlib.contextmanager
def redis_server(port: int | None = None) -> Iterator[str]:
    """A `redis-server` on an ephemeral loopback port (or `port`: a Redis that comes back where it was, empty),
    nothing persisted, its URL yielded once it answers PING; always killed, its working directory removed.
    Skips the test where redis-server is not installed."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(binary, os.X_OK):
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = port or free_port()
    workdir = tempfile.mkdtemp(prefix="toolfleet-redis-")
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {proc.stderr.read().decode()[-1000:]}")  # type: ignore[union-attr]
            with (
                contextlib.suppress(redis.exceptions.ConnectionError, redis.exceptions.TimeoutError),
                redis.from_url(url, socket_connect_timeout=1, socket_timeout=1) as client,
            ):
                if client.ping():
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer PING")
            time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait(10)
        proc.stderr.close()  # type: ignore[union-attr]
        shutil.rmtree(workdir, ignore_errors=True)
