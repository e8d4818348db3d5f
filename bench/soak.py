"""Soak: the fleet under steady load for a long while, sampled each minute, with the slope of every sample.

The fleet runs as local processes on loopback (the SCRIPTED worker, browser, python and container with
Docker sandboxes, the gateway, the orchestrator); `--loops` agent loops send requests one after another
(the demo request - browser, python and container in one response - alternating with a continued python
conversation, `store: true` as by default), and every `--interval-s` (60) each service's RSS and open file
descriptors (from /proc), the tool servers' sessions (their /metrics) and the sandbox containers of each
tool replica (by its instance label) are sampled. At the end: the samples, the least-squares slope per
minute of each, requests answered / failed and their p50/p99. A leak shows as a slope that stays positive
over the run; a flat one is noise around zero. Not part of CI.
`--conversation-idle-s` shortens the orchestrator's conversation idle time (1200 s, the production default) so the
sessions held reach their plateau within the run; `--settle-minutes` leaves the ramp up to that plateau out of
the slopes (the samples are all printed).
Usage: python -m bench.soak [--minutes 20] [--loops 4] [--interval-s 60] [--conversation-idle-s 1200]
       [--settle-minutes 0] [--out results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai

from bench.report import save
from tests.deploy.fleet import DEMO_TOOLS
from tests.support.service import REPO, Service, running_service

DEMO = {"input": "Run the fleet demo now.", "tools": DEMO_TOOLS}
COMPUTE = {"input": "please compute 6*7", "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}
TOOLS = ("browser", "python", "container")
STOP_GRACE_S = 300.0
"""A tool server's stop at the end: its drain (--drain-s, 10 s) and then removing every sandbox it holds
(hundreds after a long run: `store: true` keeps a conversation's sandbox for 20 minutes idle)."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak")
    p.add_argument("--minutes", type=float, default=20.0, help="how long the load runs")
    p.add_argument("--loops", type=int, default=4, help="concurrent agent loops")
    p.add_argument("--interval-s", type=float, default=60.0, help="seconds between samples")
    p.add_argument("--conversation-idle-s", type=float, default=1200.0, help="the orchestrator's --session-idle-s")
    p.add_argument("--settle-minutes", type=float, default=0.0, help="samples before this are left out of slopes")
    p.add_argument("--out", type=Path, help="write the samples and slopes as JSON here")
    return p.parse_args(argv)


@dataclass
class Fleet:
    services: dict[str, Service]
    instances: dict[str, str]
    """Tool name -> the instance label of its sandboxes."""
    client: openai.OpenAI


@contextlib.contextmanager
def local_fleet(conversation_idle_s: float) -> Iterator[Fleet]:
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolfleet-soak-")))
        scenario = REPO / "orchestrator" / "worker" / "scenarios" / "demo.yaml"
        services = {"worker": ["worker", "--scripted", "--scenario", str(scenario)], "browser": ["browser"]}
        instances = {tool: f"soak-{tool}-{uuid.uuid4().hex[:8]}" for tool in ("python", "container")}
        for tool, instance in instances.items():
            services[tool] = [tool, "--backend", "docker", "--pool-size", "2", "--instance", instance]
        started = {
            name: stack.enter_context(running_service(["-m", "toolkit.cli", *args])) for name, args in services.items()
        }
        routes = tmp / "gateway.yaml"
        ns = {tool: {"replicas": [f"{started[tool].url}/mcp"]} for tool in TOOLS}
        routes.write_text(json.dumps({"namespaces": ns}))
        started["gateway"] = stack.enter_context(
            running_service(["-m", "toolkit.cli", "gateway", "--config", str(routes)])
        )
        started["orchestrator"] = stack.enter_context(
            running_service(
                [
                    "-m",
                    "toolkit.cli",
                    "orchestrator",
                    "--worker-urls",
                    json.dumps([started["worker"].url]),
                    "--tools-url",
                    started["gateway"].url,
                    "--store-path",
                    str(tmp / "responses.sqlite3"),
                    "--session-idle-s",
                    str(conversation_idle_s),
                    "--reap-interval-s",
                    str(min(60.0, conversation_idle_s / 4)),
                ]
            )
        )
        for tool in ("python", "container"):  # before the ExitStack's own stop (15 s): every held sandbox goes
            stack.callback(started[tool].stop, grace_s=STOP_GRACE_S)
        client = openai.OpenAI(
            base_url=f"{started['orchestrator'].url}/v1", api_key="unused", max_retries=0, timeout=120
        )
        yield Fleet(started, instances, client)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def sessions(svc: Service) -> float:
    text = httpx.get(f"{svc.url}/metrics", timeout=10, trust_env=False).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("toolfleet_tool_sessions_active{")
    )


def containers(instance: str) -> int:
    out = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=toolfleet.instance={instance}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return len(out.split())


def sample(fleet: Fleet) -> dict[str, float]:
    row: dict[str, float] = {}
    for name, svc in fleet.services.items():
        row[f"{name}.rss_mb"] = round(rss_mb(svc.proc.pid), 1)
        row[f"{name}.fds"] = len(os.listdir(f"/proc/{svc.proc.pid}/fd"))
    for tool in TOOLS:
        row[f"{tool}.sessions"] = sessions(fleet.services[tool])
    for tool, instance in fleet.instances.items():
        row[f"{tool}.containers"] = containers(instance)
    return row


def slope_per_minute(times_s: list[float], values: list[float]) -> float:
    """Least-squares slope, per minute."""
    if len(times_s) < 2:
        return 0.0
    return statistics.linear_regression(times_s, values).slope * 60


@dataclass
class Load:
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def loop(self, client: openai.OpenAI) -> None:
        """One agent loop: a demo request, then a turn of its own python conversation, and again."""
        previous: str | None = None
        while not self.stop.is_set():
            for body, chain in ((DEMO, False), (COMPUTE, True)):
                started = time.perf_counter()
                try:
                    extra = {"previous_response_id": previous} if chain and previous else {}
                    resp = client.responses.create(model="m", **body, **extra)
                    if resp.status != "completed":
                        self.failures.append(f"status {resp.status}")
                    if chain:
                        previous = resp.id
                except openai.OpenAIError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}"[:200])
                self.latencies_ms.append((time.perf_counter() - started) * 1000)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stopped soak still stops its fleet and sandboxes
    with local_fleet(args.conversation_idle_s) as fleet:
        load = Load()
        threads = [threading.Thread(target=load.loop, args=(fleet.client,)) for _ in range(args.loops)]
        for thread in threads:
            thread.start()
        t0 = time.monotonic()
        times: list[float] = []
        rows: list[dict[str, float]] = []
        try:
            while True:
                times.append(time.monotonic() - t0)
                rows.append(sample(fleet))
                done = f"{len(load.latencies_ms)} requests, {len(load.failures)} failed"
                print(f"[{times[-1] / 60:5.1f} min] {done}: {rows[-1]}", flush=True)
                if times[-1] >= args.minutes * 60:
                    break
                time.sleep(min(args.interval_s, max(args.minutes * 60 - times[-1], 0.0)))
        finally:
            load.stop.set()
            for thread in threads:
                thread.join()
    settled = [i for i, t in enumerate(times) if t >= args.settle_minutes * 60] or list(range(len(times)))
    at = [times[i] for i in settled]
    slopes = {key: round(slope_per_minute(at, [rows[i][key] for i in settled]), 3) for key in rows[0]}
    ordered = sorted(load.latencies_ms)
    summary = {
        "minutes": round(times[-1] / 60, 1),
        "loops": args.loops,
        "requests": len(ordered),
        "failed": len(load.failures),
        "p50_ms": round(statistics.median(ordered), 1) if ordered else None,
        "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))], 1) if ordered else None,
        "throughput_rps": round(len(ordered) / times[-1], 2) if times[-1] else None,
    }
    print(json.dumps(summary))
    print(f"slope per minute from {at[0] / 60:.1f} min (that sample -> last):")
    for key, slope in slopes.items():
        print(f"  {key:28} {slope:+9.3f}   ({rows[settled[0]][key]} -> {rows[-1][key]})")
    if load.failures:
        print("failures (first 5):", *load.failures[:5], sep="\n  ")
    save(
        str(args.out) if args.out else None,
        [{"t_s": round(t, 1), **r} for t, r in zip(times, rows, strict=True)],
        **summary,
        slopes=slopes,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
