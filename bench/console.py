"""The operator console's pages timed with 1,000 responses running and 1,000 tool sessions held, against the
JSON they are built from.

One orchestrator (over loopback HTTP) in front of the scripted stand-in worker, which holds 1,000 background
responses open (a token every `--token-delay` s), and a gateway subprocess over a fixture MCP server and a kit
tool server (`bench.kit`'s, in this process) holding 1,000 sessions, each opened by one `tools/call` with its
own `x-session-id`; and 1,000 foreground responses another replica runs, as its list in the roster says
(`--elsewhere`, written to the shared store as that replica would write it). Each row is N GETs of one page,
one after another, timed at the client over loopback: an upper bound of the server-side render. Baselines in
the same run: the orchestrator's `/healthz` (JSON, no template) and the gateway's `/admin/status` and
`/admin/sessions` read directly (what Fleet, Approvals and Sessions wait on). Target: every page <= 100 ms p99.
Usage: python -m bench.console [--running 1000] [--sessions 1000] [--elsewhere 1000] [--n 200] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.kit import kit_app  # noqa: E402
from bench.report import print_values, save  # noqa: E402
from bench.wire import wire_session  # noqa: E402
from orchestrator.persist import Stores  # noqa: E402
from orchestrator.persist.roster import Running  # noqa: E402
from orchestrator.persist.sqlite import SQLiteStores  # noqa: E402
from orchestrator.worker.scripted import Scenario, ScriptedModel  # noqa: E402
from orchestrator.worker.scripted import build_app as build_worker  # noqa: E402
from tests.console.stack import CLIENT, GATEWAY_ADMIN, admin_client, orchestrator  # noqa: E402
from tests.support.asgi import serve_asgi  # noqa: E402
from tests.support.gateway import fixtures, gateway_config, running_gateway  # noqa: E402
from toolkit.settings import ToolServerSettings  # noqa: E402

SLOW = "<|channel|>final<|message|>" + "held " * 100 + "<|return|>"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.console")
    p.add_argument("--running", type=int, default=1000, help="background responses held open while timing")
    p.add_argument("--sessions", type=int, default=1000, help="tool sessions held on the kit server while timing")
    p.add_argument(
        "--elsewhere",
        type=int,
        default=1000,
        help="foreground responses another replica runs while timing (its roster list, written as it would)",
    )
    p.add_argument("--n", type=int, default=200, help="GETs per row")
    p.add_argument("--token-delay", type=float, default=30.0, help="seconds between the stand-in's tokens")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


@contextlib.contextmanager
def fleet(token_delay_s: float, sessions: int, stores: Stores) -> Iterator[tuple[str, str, str]]:
    """The orchestrator's URL (over `stores`), the gateway's and the kit server's; every process and temporary file
    gone on exit."""
    model = ScriptedModel(Scenario.from_dict({"rules": [], "default": SLOW, "token_delay_s": token_delay_s}))
    room = ToolServerSettings(max_sessions=sessions + 1, max_sessions_per_owner=sessions + 1)
    with contextlib.ExitStack() as stack:
        worker = stack.enter_context(serve_asgi(build_worker(model)))
        upstream = stack.enter_context(fixtures("bench"))[0]
        kit = stack.enter_context(serve_asgi(kit_app(room)))
        namespaces = {"fixture": [upstream.url], "kit": [f"{kit}/mcp"]}
        cfg = gateway_config(namespaces, security={"admin_tokens": [GATEWAY_ADMIN]})
        gateway = stack.enter_context(running_gateway(cfg))
        base = stack.enter_context(orchestrator(worker, gateway.base, stores, max_concurrent_per_key=0))
        yield base, gateway.base, kit


async def hold_sessions(kit: str, count: int) -> None:
    """`count` sessions on the kit server, each opened by one call under its own `x-session-id`, 50 at a time."""
    limit = asyncio.Semaphore(50)

    async def one(i: int) -> None:
        async with limit, wire_session(kit, {"x-session-id": f"bench-{i:05d}"}) as mcp:
            await mcp.call_tool("noop", {})

    await asyncio.gather(*(one(i) for i in range(count)))


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


async def list_elsewhere(stores: Stores, count: int) -> None:
    """`count` foreground responses in the roster as another replica lists its own (`responses/roster.py`)."""
    now = time.time()
    running = [Running(f"resp_fg{i:05d}", "key_bench", "gpt-oss", now, "replica_elsewhere") for i in range(count)]
    await stores.roster.renew("replica_elsewhere", running, 3600)


def rows(base: str, gateway: str, ids: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    gw_auth = {"authorization": f"Bearer {GATEWAY_ADMIN}"}
    sessions, n, total = args.sessions, args.n, len(ids) + args.elsewhere
    with admin_client(base) as http:
        assert f"of {total}." in http.get("/console/live").text  # every response is running (or listed) and counted
        assert f"of {sessions}." in http.get("/console/sessions").text  # every session is held and listed
        last = -(-sessions // 50)
        return [
            timed(http, "baseline: orchestrator /healthz (JSON)", "/healthz", n),
            timed(http, "baseline: gateway /admin/status (JSON)", f"{gateway}/admin/status", n, headers=gw_auth),
            timed(http, "baseline: gateway /admin/sessions (JSON)", f"{gateway}/admin/sessions", n, headers=gw_auth),
            timed(http, f"/console/sessions (page 1 of {sessions} held)", "/console/sessions", n),
            timed(http, "/console/sessions, last page, by owner", f"/console/sessions?sort=owner&page={last}", n),
            timed(http, "/console/sessions, filtered to one", f"/console/sessions?q=bench-{sessions // 2:05d}", n),
            timed(http, "/console/keys", "/console/keys", n),
            timed(http, "/console/fleet", "/console/fleet", n),
            timed(http, f"/console/live (page 1 of {total} running)", "/console/live", n),
            timed(http, "/console/live, last page, sorted by id", f"/console/live?sort=id&page={-(-total // 50)}", n),
            timed(http, "/console/live, filtered to one id", f"/console/live?q={ids[len(ids) // 2]}", n),
            timed(http, "/console/approvals", "/console/approvals", n),
            timed(http, "/console/traces, one running response", f"/console/traces?id={ids[0]}", n),
        ]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stores = SQLiteStores()
    with fleet(args.token_delay, args.sessions, stores) as (base, gateway, kit):
        asyncio.run(hold_sessions(kit, args.sessions))
        asyncio.run(list_elsewhere(stores, args.elsewhere))
        ids = start_running(base, args.running)
        found = rows(base, gateway, ids, args)
    save(args.out, found, running=args.running, sessions=args.sessions, elsewhere=args.elsewhere, n=args.n)
    print_values(found, width=52, value_width=8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
