"""Access-control figures: what API keys and per-key limits add to a request, and how alike refusals look.

Rows: GET /v1/models over loopback HTTP with no keys, with 100 keys configured (a valid key), and with
keys plus a per-key rate limit; then the uniform 400 of a refused MCP server_url (loopback, no
connection made) against an accepted-but-closed port (an allowlisted 127.0.0.1:9), with the refusal
floor off and at 0.3 s. Loopback only: no name is resolved and nothing leaves the machine.
Usage: python -m bench.access [--n 300] [--refusals 20] [--out results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.report import print_values, save  # noqa: E402
from orchestrator.app import create_app  # noqa: E402
from orchestrator.persist.sqlite import SQLiteStores  # noqa: E402
from orchestrator.settings import OrchestratorSettings  # noqa: E402
from tests.support.asgi import serve_asgi  # noqa: E402

KEYS = [f"sk-bench-{i:03d}" for i in range(100)]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.access")
    p.add_argument("--n", type=int, default=300, help="requests per latency row")
    p.add_argument("--refusals", type=int, default=20, help="requests per refusal row")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


@contextlib.contextmanager
def orchestrator(**settings: Any) -> Iterator[str]:
    """An orchestrator without a worker pool: the measured routes never generate."""

    async def no_generation(req: Any) -> AsyncIterator[Any]:
        raise RuntimeError("the access bench never generates")
        yield

    app = create_app(OrchestratorSettings(date="2026-12-02", **settings), generate=no_generation, stores=SQLiteStores())
    with serve_asgi(app) as url:
        yield url


def _quantiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    p99 = s[min(len(s) - 1, len(s) * 99 // 100)]
    return {"p50_ms": round(s[len(s) // 2] * 1000, 3), "p99_ms": round(p99 * 1000, 3), "max_ms": round(s[-1] * 1000, 3)}


def bench_models(name: str, n: int, key: str | None, **settings: Any) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    with orchestrator(**settings) as url, httpx.Client(base_url=url, headers=headers) as http:
        for _ in range(20):
            http.get("/v1/models").raise_for_status()
        samples = []
        for _ in range(n):
            t = time.perf_counter()
            http.get("/v1/models").raise_for_status()
            samples.append(time.perf_counter() - t)
    q = _quantiles(samples)
    return {"name": f"GET /v1/models, {name}", "value": q["p50_ms"], "unit": "ms p50", **q}


def bench_refusals(n: int, floor_s: float) -> list[dict[str, Any]]:
    cases = {
        "refused (loopback, no connection)": "http://127.0.0.1:1/mcp",
        "accepted, closed port (allowlisted)": "http://127.0.0.1:9/mcp",
    }
    rows = []
    with (
        orchestrator(mcp_allow=["http://127.0.0.1:9/*"], mcp_refusal_floor_s=floor_s) as url,
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        for label, server_url in cases.items():
            tool = {"type": "mcp", "server_label": "t", "server_url": server_url}
            samples, bodies = [], set()
            for _ in range(n):
                t = time.perf_counter()
                r = http.post("/v1/responses", json={"input": "x", "tools": [tool]})
                samples.append(time.perf_counter() - t)
                assert r.status_code == 400
                bodies.add(r.text)
            q = _quantiles(samples)
            rows.append(
                {
                    "name": f"uniform 400, {label}, floor {floor_s} s",
                    "value": q["p50_ms"],
                    "unit": "ms p50",
                    **q,
                    "bodies": len(bodies),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    rows = [
        bench_models("no keys", args.n, None),
        bench_models("100 keys, valid key", args.n, KEYS[-1], api_keys=KEYS),
        bench_models("100 keys + 10000 rps limit", args.n, KEYS[-1], api_keys=KEYS, rate_limit_rps=10_000),
    ]
    for floor_s in (0.0, 0.3):
        rows += bench_refusals(args.refusals, floor_s)
    save(args.out, rows)
    print_values(rows, width=64, value_width=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
