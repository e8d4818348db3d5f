"""Added latency of a `tools/call` through the gateway versus directly, and the same for a peer gateway.

    python bench/gateway.py [--n 1000] [--warmup 200] [--concurrency 1 32] [--peer contextforge|none]
                            [--untraced | --no-untraced] [--out results-gateway.json]

Starts the test fixture MCP server (one replica) and the gateway on loopback, then times
`tools/call echo` over streamable HTTP with a plain keep-alive HTTP client: direct to the
replica, through our gateway, and through IBM ContextForge (`mcp-contextforge-gateway`, its own
venv under .cache/, SQLite) when it can run here. Prints p50/p99 per path and the added latency
(path minus direct) at each concurrency, plus calls/s. Every call carries a W3C `traceparent`, as
the orchestrator's do; `toolfleet` runs with tracing on (the default: spans, no exporter), and
`toolfleet-untraced` is a second gateway started with `TOOLFLEET_GATEWAY_TRACING=false`, so the
two rows show what tracing costs. `byte-pipe` is `bench.pipe`, a process that only copies bytes between the
client and the replica: the floor any proxy hop adds here, so the gateway's figure above it is its own work.
Calls to the paths being compared are interleaved (direct, gateway, direct, ...), so drift in the
machine's load hits every path alike; calls/s is concurrency / mean latency. `cpu ms` is the CPU a call
cost the process that path adds (the gateway, its probes included), or for `direct` the replica (which
serves every path's calls), read from /proc: load moves it less than it moves the latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.report import environment  # noqa: E402
from tests.support.asgi import free_port  # noqa: E402
from tests.support.gateway import (  # noqa: E402
    Upstream,
    fixtures,
    gateway_config,
    running_gateway,
    stop_process,
    wait_http,
)

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "traceparent": f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01",
}
VERSION = "2025-11-25"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000, help="timed calls per path and concurrency")
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--peer", choices=["contextforge", "none"], default="contextforge")
    p.add_argument(
        "--untraced", action=argparse.BooleanOptionalAction, default=True, help="also time a gateway with tracing off"
    )
    p.add_argument("--out", default="results-gateway.json")
    return p.parse_args(argv)


class McpSession:
    """A bare streamable-HTTP MCP session: initialize once, then timed `tools/call`s."""

    def __init__(self, http: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None) -> None:
        self.http, self.url = http, url
        self.headers = {**HEADERS, **(headers or {})}
        self.next_id = 0

    async def rpc(self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False) -> Any:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self.next_id += 1
            body["id"] = self.next_id
        response = await self.http.post(self.url, json=body, headers=self.headers)
        if notify:
            return None
        if sid := response.headers.get("mcp-session-id"):
            self.headers["mcp-session-id"] = sid
        text = response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            text = [line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip()][-1]
        msg = json.loads(text)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        return msg["result"]

    async def open(self) -> McpSession:
        init = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        await self.rpc("initialize", init)
        self.headers["mcp-protocol-version"] = VERSION
        await self.rpc("notifications/initialized", notify=True)
        return self

    async def call(self, tool: str, args: dict[str, Any]) -> float:
        start = time.perf_counter()
        result = await self.rpc("tools/call", {"name": tool, "arguments": args})
        elapsed = time.perf_counter() - start
        if result.get("isError"):
            raise RuntimeError(f"tool error: {result}")
        return elapsed


Path_ = tuple[str, str, dict[str, str] | None]  # url, tool name, extra headers


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux `/proc`; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    paths: dict[str, Path_], n: int, warmup: int, concurrency: int, pids: dict[str, int] | None = None
) -> dict[str, dict[str, Any]]:
    """Time `tools/call` on every path, interleaved call by call so load drift hits all paths alike. `pids`: the
    process each path adds (direct: the replica), whose CPU per call is a figure the machine's load moves little."""
    limits = httpx.Limits(max_connections=4 * concurrency + 8, max_keepalive_connections=4 * concurrency + 8)
    async with httpx.AsyncClient(trust_env=False, limits=limits, timeout=120) as http:
        sessions = [
            {name: await McpSession(http, url, headers).open() for name, (url, _, headers) in paths.items()}
            for _ in range(concurrency)
        ]
        per = max(1, n // concurrency)
        samples: dict[str, list[float]] = {name: [] for name in paths}

        async def worker(mine: dict[str, McpSession], count: int, out: dict[str, list[float]]) -> None:
            for i in range(count):
                for name, session in mine.items():
                    out[name].append(await session.call(paths[name][1], {"text": f"ping {i}"}))

        await asyncio.gather(*(worker(m, max(1, warmup // concurrency), {k: [] for k in paths}) for m in sessions))
        pids = {name: pid for name, pid in (pids or {}).items() if name in paths}
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        await asyncio.gather(*(worker(m, per, samples) for m in sessions))
        cpu_after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    out: dict[str, dict[str, Any]] = {}
    for name, values in samples.items():
        q = statistics.quantiles(sorted(values), n=100)
        mean = statistics.fmean(values)
        out[name] = {
            "p50_ms": q[49] * 1000,
            "p99_ms": q[98] * 1000,
            "calls_per_s": concurrency / mean,
            "n": len(values),
        }
        before, after = cpu_before.get(name), cpu_after.get(name)
        if before is not None and after is not None:
            # the replica serves the calls of every path, the gateways only their own
            calls = sum(map(len, samples.values())) if name == "direct" else len(values)
            out[name]["cpu_ms_per_call"] = (after - before) * 1000 / calls
    return out


@dataclass
class Pipe:
    port: int
    pid: int


@contextlib.contextmanager
def byte_pipe(up: Upstream) -> Iterator[Pipe]:
    """`bench.pipe` in front of the replica: the floor any proxy process adds on this machine."""
    port = free_port()
    cmd = [sys.executable, "-m", "bench.pipe", "--port", str(port), "--to", f"{up.host}:{up.port}"]
    proc = subprocess.Popen(cmd, cwd=REPO)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        yield Pipe(port, proc.pid)
    finally:
        stop_process(proc)


# ---- the peer: IBM ContextForge (mcp-contextforge-gateway), in its own venv, on loopback with SQLite ----

CONTEXTFORGE_SPEC = "mcp-contextforge-gateway==1.0.7.post20260921"
CONTEXTFORGE_VENV = REPO / ".cache" / "contextforge-venv"


@dataclass
class Peer:
    url: str
    tool: str
    headers: dict[str, str]


def _contextforge_python() -> Path:
    py = CONTEXTFORGE_VENV / "bin" / "python"
    if not (CONTEXTFORGE_VENV / "bin" / "mcpgateway").exists():
        subprocess.run([sys.executable, "-m", "venv", str(CONTEXTFORGE_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", CONTEXTFORGE_SPEC], check=True, timeout=900)
    return py


@contextlib.contextmanager
def started_contextforge(upstream: str) -> Iterator[Peer]:
    """ContextForge with SQLite on a free loopback port, federating `upstream` as a virtual server."""
    py = _contextforge_python()
    workdir = Path(tempfile.mkdtemp(prefix="contextforge-"))
    port = free_port()
    secret = secrets.token_hex(32)
    env = _contextforge_env(workdir, secret)
    log = open(workdir / "contextforge.log", "wb")
    proc = subprocess.Popen(
        [str(py), "-m", "mcpgateway.cli", "--host", "127.0.0.1", "--port", str(port)],
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=log,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, base, workdir)
        auth = {"authorization": f"Bearer {_admin_token(py, env, secret, workdir)}"}
        yield _federate(base, auth, upstream)
    finally:
        stop_process(proc)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _contextforge_env(workdir: Path, secret: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{workdir}/mcp.db",
        "JWT_SECRET_KEY": secret,
        "AUTH_ENCRYPTION_SECRET": secrets.token_hex(32),
        "PLATFORM_ADMIN_EMAIL": "admin@example.com",
        "PLATFORM_ADMIN_PASSWORD": "Bench-Passw0rd-" + secrets.token_hex(4),
        "SSRF_ALLOW_LOCALHOST": "true",
        "ENVIRONMENT": "development",
        "LOG_LEVEL": "ERROR",
        "MCPGATEWAY_UI_ENABLED": "false",
        "MCPGATEWAY_ADMIN_API_ENABLED": "false",
        # a benchmark, not a deployment: no rate limits in the measured path
        "RATE_LIMITING_ENABLED": "false",
        "TOOL_RATE_LIMIT": "1000000",
        "RATE_LIMIT_MEDIUM_RPM": "1000000",
        "RATE_LIMIT_MEDIUM_BURST": "100000",
    }


def _wait_healthy(proc: subprocess.Popen[bytes], base: str, workdir: Path) -> None:
    deadline = time.monotonic() + 180
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"ContextForge exited {proc.returncode}; see {workdir}/contextforge.log")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/health", timeout=2, trust_env=False).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError("ContextForge did not become healthy in 180 s")
        time.sleep(0.5)


def _admin_token(py: Path, env: dict[str, str], secret: str, workdir: Path) -> str:
    """A JWT for the platform admin, made by ContextForge's own tool."""
    tool = [str(py), "-m", "mcpgateway.utils.create_jwt_token"]
    made = subprocess.run(
        [*tool, "--username", "admin@example.com", "--exp", "120", "--secret", secret],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=workdir,
    )
    return made.stdout.strip().splitlines()[-1]


def _federate(base: str, auth: dict[str, str], upstream: str) -> Peer:
    """`upstream` registered as a gateway, and a virtual server offering its `echo` tool."""
    with httpx.Client(base_url=base, headers=auth, timeout=60, trust_env=False) as http:
        created = http.post("/gateways", json={"name": "bench", "url": upstream, "transport": "STREAMABLEHTTP"})
        created.raise_for_status()
        tools = http.get("/tools").json()
        tools = tools if isinstance(tools, list) else tools.get("items") or tools.get("tools") or []
        echo = next(t for t in tools if t.get("originalName", t.get("name", "")).endswith("echo"))
        server = http.post("/servers", json={"server": {"name": "bench", "associated_tools": [echo["id"]]}})
        if server.status_code >= 400:
            server = http.post("/servers", json={"name": "bench", "associated_tools": [echo["id"]]})
        server.raise_for_status()
    return Peer(f"{base}/servers/{server.json()['id']}/mcp", echo["name"], auth)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'path':<20}{'conc':>5}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}{'+p50 ms':>9}{'+p99 ms':>9}{'cpu ms':>8}")
    for r in rows:
        added = f"{r['added_p50_ms']:>9.3f}{r['added_p99_ms']:>9.3f}" if "added_p50_ms" in r else f"{'':>18}"
        cpu = f"{r['cpu_ms_per_call']:>8.3f}" if "cpu_ms_per_call" in r else ""
        figures = f"{r['p50_ms']:>9.3f}{r['p99_ms']:>9.3f}{r['calls_per_s']:>10.0f}"
        print(f"{r['path']:<20}{r['concurrency']:>5}{figures}{added}{cpu}")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    with ExitStack() as stack:
        (up,) = stack.enter_context(fixtures("bench"))
        gw = stack.enter_context(running_gateway(gateway_config({"bench": [up.url]})))
        paths: dict[str, tuple[str, str, dict[str, str] | None]] = {
            "direct": (up.url, "echo", None),
            "toolfleet": (gw.url("bench"), "echo", None),
        }
        assert gw.proc is not None
        pipe = stack.enter_context(byte_pipe(up))
        paths["byte-pipe"] = (f"http://127.0.0.1:{pipe.port}/mcp", "echo", None)
        pids = {"direct": up.proc.pid, "toolfleet": gw.proc.pid, "byte-pipe": pipe.pid}
        if args.untraced:
            off = {"TOOLFLEET_GATEWAY_TRACING": "false"}
            untraced = stack.enter_context(running_gateway(gateway_config({"bench": [up.url]}), env=off))
            paths["toolfleet-untraced"] = (untraced.url("bench"), "echo", None)
            assert untraced.proc is not None
            pids["toolfleet-untraced"] = untraced.proc.pid
        if args.peer == "contextforge":
            try:
                peer = stack.enter_context(started_contextforge(up.url))
                paths["contextforge"] = (peer.url, peer.tool, peer.headers)
            except Exception as exc:  # the peer is optional: say exactly why it did not run
                notes.append(f"contextforge not measured: {exc}")
        groups = [{k: v for k, v in paths.items() if k != "contextforge"}]
        if "contextforge" in paths:
            groups.append({"direct": paths["direct"], "contextforge": paths["contextforge"]})
        for concurrency in args.concurrency:
            for index, group in enumerate(groups):
                result = asyncio.run(measure(group, args.n, args.warmup, concurrency, pids))
                base = result["direct"]
                for name, stats in result.items():
                    if name == "direct" and index > 0:
                        continue  # the direct path is reported once per concurrency
                    row: dict[str, Any] = {"path": name, "concurrency": concurrency, **stats}
                    if name != "direct":
                        row["added_p50_ms"] = stats["p50_ms"] - base["p50_ms"]
                        row["added_p99_ms"] = stats["p99_ms"] - base["p99_ms"]
                    rows.append(row)
    notes.append("load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    Path(args.out).write_text(json.dumps(environment() | {"rows": rows, "notes": notes}, indent=2))
    print_table(rows)
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
