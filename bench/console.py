"""The operator console's pages timed with 1,000 responses running, against the JSON they are built from.

One orchestrator (over loopback HTTP) in front of the scripted stand-in worker, which holds 1,000 background
responses open (a token every `--token-delay` s), and a gateway subprocess over a fixture MCP server. Each row
is N GETs of one page, one after another, timed at the client over loopback: an upper bound of the server-side
render. Baselines in the same run: the orchestrator's `/healthz` (JSON, no template) and the gateway's
`/admin/status` read directly (what Fleet and Approvals wait on). Target: every page <= 100 ms p99.
Usage: python -m bench.console [--running 1000] [--n 200] [--out results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.report import print_values, save  # noqa: E402
from orchestrator.worker.scripted import Scenario, ScriptedModel  # noqa: E402
from orchestrator.worker.scripted import build_app as build_worker  # noqa: E402
from tests.console.stack import CLIENT, GATEWAY_ADMIN, admin_client, orchestrator  # noqa: E402
from tests.support.asgi import serve_asgi  # noqa: E402
from tests.support.gateway import fixtures, gateway_config, running_gateway  # noqa: E402

SLOW = "<|channel|>final<|message|>" + "held " * 100 + "<|return|>"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.console")
    p.add_argument("--running", type=int, default=1000, help="background responses held open while timing")
    p.add_argument("--n", type=int, default=200, help="GETs per row")
    p.add_argument("--token-delay", type=float, default=30.0, help="seconds between the stand-in's tokens")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


@contextlib.contextmanager
def fleet(token_delay_s: float) -> Iterator[tuple[str, str]]:
    """The orchestrator's URL and the gateway's, every process and temporary file gone on exit."""
    model = ScriptedModel(Scenario.from_dict({"rules": [], "default": SLOW, "token_delay_s": token_delay_s}))
    with contextlib.ExitStack() as stack:
        worker = stack.enter_context(serve_asgi(build_worker(model)))
        upstream = stack.enter_context(fixtures("bench"))[0]
        cfg = gateway_config({"fixture": [upstream.url]}, security={"admin_tokens": [GATEWAY_ADMIN]})
        gateway = stack.enter_context(running_gateway(cfg))
        yield stack.enter_context(orchestrator(worker, gateway.base, max_concurrent_per_key=0)), gateway.base


def quantiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    p99 = s[min(len(s) - 1, len(s) * 99 // 100)]
    return {"p50_ms": round(s[len(s) // 2] * 1000, 2), "p99_ms": round(p99 * 1000, 2), "max_ms": round(s[-1] * 1000, 2)}


def timed(http: httpx.Client, name: str, url: str, n: int, **kw: Any) -> dict[str, Any]:
    for _ in range(5):  # warm: templates compiled, connections open
        http.get(url, **kw).raise_for_status()
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        http.get(url, **kw).raise_for_status()
        samples.append(time.perf_counter() - t)
    q = quantiles(samples)
    return {"name": name, "value": q["p99_ms"], "unit": "ms p99", **q}


def start_running(base: str, count: int) -> list[str]:
    auth = {"authorization": f"Bearer {CLIENT}"}
    with httpx.Client(base_url=base, headers=auth, trust_env=False, timeout=30) as http:
        body = {"model": "gpt-oss", "input": "hold", "background": True}
        return [http.post("/v1/responses", json=body).raise_for_status().json()["id"] for _ in range(count)]


def rows(base: str, gateway: str, ids: list[str], n: int) -> list[dict[str, Any]]:
    gw_auth = {"authorization": f"Bearer {GATEWAY_ADMIN}"}
    with admin_client(base) as http:
        assert f"of {len(ids)}." in http.get("/console/live").text  # every response is running and counted
        return [
            timed(http, "baseline: orchestrator /healthz (JSON)", "/healthz", n),
            timed(http, "baseline: gateway /admin/status (JSON)", f"{gateway}/admin/status", n, headers=gw_auth),
            timed(http, "/console/fleet", "/console/fleet", n),
            timed(http, f"/console/live (page 1 of {len(ids)} running)", "/console/live", n),
            timed(
                http, "/console/live, last page, sorted by id", f"/console/live?sort=id&page={-(-len(ids) // 50)}", n
            ),
            timed(http, "/console/live, filtered to one id", f"/console/live?q={ids[len(ids) // 2]}", n),
            timed(http, "/console/approvals", "/console/approvals", n),
            timed(http, "/console/traces, one running response", f"/console/traces?id={ids[0]}", n),
        ]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with fleet(args.token_delay) as (base, gateway):
        ids = start_running(base, args.running)
        found = rows(base, gateway, ids, args.n)
    save(args.out, found, running=args.running, n=args.n)
    print_values(found, width=52, value_width=8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
