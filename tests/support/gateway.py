"""Real processes on loopback for the gateway tests: fixture MCP servers and the gateway, and MCP clients."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import yaml
from mcp.client.client import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from tests.support.asgi import free_port

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "gateway" / "fixture_server.py"
PY = sys.executable
TRANSPORTS = ("streamable-http", "sse")
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
"""The headers of a plain streamable-HTTP POST."""
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
"""An `initialize` request, for tests that speak raw HTTP."""


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    """`sig`, then SIGKILL if it has not ended within 10 s; waits for it either way (no zombie left)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@dataclass
class Upstream:
    replica: str
    port: int
    proc: subprocess.Popen[Any]
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"

    def kill(self) -> None:
        stop_process(self.proc, signal.SIGKILL)


def start_fixture(
    replica: str,
    *,
    variant: str = "a",
    name: str = "fixture",
    port: int = 0,
    garbage: str | None = None,
    host: str = "127.0.0.1",
) -> Upstream:
    cmd = [PY, str(FIXTURE), "--port", str(port), "--replica", replica, "--variant", variant, "--name", name]
    cmd += ["--host", host]
    if garbage is not None:
        cmd = [PY, str(FIXTURE.with_name("garbage_server.py")), "--port", str(port), "--mode", garbage]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("READY "):
        stop_process(proc, signal.SIGKILL)
        raise RuntimeError(f"fixture server {replica} did not start: {line!r}")
    up = Upstream(replica, int(line.split()[1]), proc, host)
    if garbage is None:
        wait_http(up.url.removesuffix("/mcp") + "/healthz")
    return up


@contextlib.contextmanager
def fixtures(*replicas: str, **kw: Any) -> Iterator[list[Upstream]]:
    started: list[Upstream] = []
    try:
        for replica in replicas:
            started.append(start_fixture(replica, **kw))
        yield started
    finally:
        for up in started:
            stop_process(up.proc)


def wait_http(url: str, *, timeout: float = 30, status: int = 200, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} while waiting for {url}")
        try:
            last = httpx.get(url, timeout=2, trust_env=False).status_code
            if last == status:
                return
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"{url} not ready: {last!r}")


def gateway_config(namespaces: dict[str, list[str]], **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "namespaces": {ns: {"replicas": urls} for ns, urls in namespaces.items()},
        "health": {"interval_s": 0.5, "timeout_s": 2, "failures_to_open": 2, "open_s": 0.5},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


class GatewayProc:
    """`python -m gateway` on a free loopback port with a YAML config written for the test."""

    def __init__(
        self,
        cfg: dict[str, Any],
        *,
        port: int | None = None,
        env: dict[str, str] | None = None,
        watch_s: float = 0,
        wrap: list[str] | None = None,
    ) -> None:
        self.watch_s = watch_s
        self.wrap = wrap or []
        """A command the gateway runs under (e.g. `unshare -m` with a hosts file of the test's own)."""
        self.dir = Path(tempfile.mkdtemp(prefix="gw-test-"))
        self.config_path = self.dir / "gateway.yaml"
        self.log_path = self.dir / "gateway.log"
        self.port = port or free_port()
        self.env = env or {}
        self.proc: subprocess.Popen[Any] | None = None
        self.write(cfg)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, ns: str, transport: str = "streamable-http") -> str:
        return f"{self.base}/{ns}/{'mcp' if transport == 'streamable-http' else 'sse'}"

    def write(self, cfg: dict[str, Any]) -> None:
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(cfg))
        tmp.replace(self.config_path)

    def start(self, *, ready: bool = True) -> GatewayProc:
        cmd = [
            *self.wrap,
            PY,
            "-m",
            "gateway",
            "--config",
            str(self.config_path),
            "--port",
            str(self.port),
            "--watch-s",
            str(self.watch_s),
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO), **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=log, env=env)
        wait_http(f"{self.base}/healthz", proc=self.proc)
        if ready:
            wait_http(f"{self.base}/readyz", proc=self.proc)
        return self

    def reload(self, cfg: dict[str, Any]) -> None:
        self.write(cfg)
        assert self.proc is not None
        self.proc.send_signal(signal.SIGHUP)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        """Stop the gateway and remove its config and log; the log's tail goes to stderr first."""
        self.stop()
        tail = self.logs()[-4000:]
        if tail:
            sys.stderr.write(f"--- gateway log tail ({self.log_path}) ---\n{tail}\n")
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def running_gateway(cfg: dict[str, Any], *, ready: bool = True, **kw: Any) -> Iterator[GatewayProc]:
    gw = GatewayProc(cfg, **kw)
    try:
        yield gw.start(ready=ready)
    finally:
        gw.close()


@contextlib.asynccontextmanager
async def connect(
    url: str, transport: str, *, headers: dict[str, str] | None = None, mode: str = "auto", **kw: Any
) -> AsyncIterator[Client]:
    """An `mcp` 2.x client over either transport."""
    if transport == "sse":
        stream = sse_client(url, headers=headers, timeout=30)
    else:
        http = httpx2.AsyncClient(headers=headers or {}, timeout=httpx2.Timeout(30, read=300))
        stream = streamable_http_client(url, http_client=http)
    async with Client(stream, mode=mode, **kw) as client:  # type: ignore[arg-type]
        yield client


async def call_text(client: Client, name: str, args: dict[str, Any] | None = None) -> str:
    result = await client.call_tool(name, args or {})
    return result.content[0].text  # type: ignore[union-attr]


def metric(base: str, name: str, **labels: str) -> float:
    """One sample of the gateway's /metrics (0 when absent)."""
    text = httpx.get(f"{base}/metrics", timeout=5, trust_env=False).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{"):
            got = ",".join(sorted(line[len(name) + 1 : line.index("}")].split(",")))
            if got == want:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def eventually(predicate: Any, within_s: float = 15, what: str = "condition") -> None:
    """Poll a blocking `predicate` (run in a thread) until it holds."""
    import anyio

    deadline = time.monotonic() + within_s
    while not await anyio.to_thread.run_sync(predicate):
        assert time.monotonic() < deadline, f"{what} never held"
        await anyio.sleep(0.1)
