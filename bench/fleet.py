"""The fleet's figures: cold start in containers, the demo request end to end, and what containers add to a tool turn.

1. cold start: `docker-compose up` of the whole fleet (images built) until the demo request is answered;
2. the demo request (browser, python and container in one response) end to end, p50 over --n;
3. a python tool turn ("compute 6*7": worker -> orchestrator -> gateway -> python sandbox and back) through
   the containerised fleet and through the same services run as local processes on loopback (the sandbox is a
   container in both), p50/p95 over --n, and the difference. A no-tool request is measured too, so the tool
   part can be told from the request's own cost. The worker is the SCRIPTED stand-in in both.
Usage: python -m bench.fleet [--n 30] [--out results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai

from tests.deploy.fleet import DEMO_TOOLS, build_images, compose_fleet
from tests.support.service import REPO, running_service

COMPUTE = {"input": "please compute 6*7", "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}
HELLO = {"input": "hello", "tools": []}
DEMO = {"input": "Run the fleet demo now.", "tools": DEMO_TOOLS}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fleet")
    p.add_argument("--n", type=int, default=30, help="requests per measured kind")
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    return p.parse_args(argv)


def timed(client: openai.OpenAI, body: dict, n: int, *, chain: bool = False) -> dict[str, float]:
    """p50/p95 of n requests; `chain` continues one conversation (its tool sessions stay warm), else each
    request is a new conversation (a new python session: a sandbox from the warm pool)."""
    resp = client.responses.create(model="m", **body)  # warm: sessions, connections, the sandbox pool
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        resp = client.responses.create(model="m", **body, **({"previous_response_id": resp.id} if chain else {}))
        samples.append((time.perf_counter() - started) * 1000)
        assert resp.status == "completed", resp
    samples.sort()
    return {"p50_ms": statistics.median(samples), "p95_ms": samples[int(0.95 * (len(samples) - 1))]}


@contextlib.contextmanager
def local_fleet() -> Iterator[openai.OpenAI]:
    """worker, python, gateway and orchestrator as local processes on ephemeral loopback ports."""
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="toolfleet-bench-")))
        scenario = REPO / "orchestrator" / "worker" / "scenarios" / "demo.yaml"
        worker = stack.enter_context(
            running_service(["-m", "toolkit.cli", "worker", "--scripted", "--scenario", str(scenario)])
        )
        instance = f"bench-{uuid.uuid4().hex[:8]}"
        sandbox = ["--backend", "docker", "--pool-size", "1", "--instance", instance]
        python = stack.enter_context(running_service(["-m", "toolkit.cli", "python", *sandbox]))
        routes = tmp / "gateway.yaml"
        routes.write_text(json.dumps({"namespaces": {"python": {"replicas": [f"{python.url}/mcp"]}}}))
        gateway = stack.enter_context(running_service(["-m", "toolkit.cli", "gateway", "--config", str(routes)]))
        orchestrator = stack.enter_context(
            running_service(
                [
                    "-m",
                    "toolkit.cli",
                    "orchestrator",
                    "--worker-urls",
                    json.dumps([worker.url]),
                    "--tools-url",
                    gateway.url,
                    "--store-path",
                    str(tmp / "responses.sqlite3"),
                ]
            )
        )
        yield openai.OpenAI(base_url=f"{orchestrator.url}/v1", api_key="unused", max_retries=0, timeout=120)


def containerised(n: int) -> dict[str, object]:
    started = time.perf_counter()
    with compose_fleet() as fleet:
        client = fleet.openai()
        while True:  # the first answer needs every tool server up, not just the orchestrator
            with contextlib.suppress(openai.APIError, httpx.HTTPError):
                resp = client.responses.create(model="m", **DEMO)
                if (
                    {i.type for i in resp.output} >= {"web_search_call", "code_interpreter_call", "mcp_call"}
                    and not any(i.type == "mcp_call" and i.error for i in resp.output)
                    and "Error"
                    not in json.dumps([i.model_dump() for i in resp.output if i.type == "code_interpreter_call"])
                ):
                    break
            time.sleep(0.5)
        cold_s = time.perf_counter() - started
        return {"cold_start_s": cold_s, "demo": timed(client, DEMO, n), **turns(client, n)}


def turns(client: openai.OpenAI, n: int) -> dict[str, dict[str, float]]:
    return {
        "tool_turn_new_session": timed(client, COMPUTE, n),
        "tool_turn_same_session": timed(client, COMPUTE, n, chain=True),
        "no_tool": timed(client, HELLO, n),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    build_images("all")
    fleet = containerised(args.n)
    with local_fleet() as client:
        local = turns(client, args.n)
    print(f"cold start of the whole fleet (compose up -> demo answered): {fleet['cold_start_s']:.1f} s")
    print(
        f"demo request end to end (3 tools, 5 tool calls): p50 {fleet['demo']['p50_ms']:.0f} ms, "  # type: ignore[index]
        f"p95 {fleet['demo']['p95_ms']:.0f} ms"
    )  # type: ignore[index]
    print(f"{'':24}{'containers p50/p95':>22}{'local processes p50/p95':>26}   (containers - local)")
    for kind, loc in local.items():
        c = fleet[kind]
        print(
            f"{kind:24}{c['p50_ms']:>13.1f} /{c['p95_ms']:>6.1f} ms{loc['p50_ms']:>17.1f} /{loc['p95_ms']:>6.1f} ms"  # type: ignore[index]
            f"   added p50 {c['p50_ms'] - loc['p50_ms']:+.1f} ms"
        )  # type: ignore[index]
    if args.out:
        args.out.write_text(
            json.dumps({"machine": platform.node(), "n": args.n, "containers": fleet, "local": local}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
