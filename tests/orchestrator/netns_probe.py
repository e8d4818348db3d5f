"""Run inside a network namespace that has only `lo` (see test_access_netns.py): SSRF cases of MCP server_url.

Not a test module itself: `test_access_netns.py` starts it under `unshare -n -m` after giving `lo` the
addresses below and bind-mounting a hosts file over /etc/hosts. Nothing here can leave the machine:
the namespace has no other interface, so private, metadata and "public" addresses exist only on `lo`.

It starts wildcard TCP listeners on one port P that count every connection by local address (a guard
that fails shows up as a count), a real MCP server on the namespace's "public" address 1.2.3.4, a
redirector that sends MCP clients to loopback, the scripted worker and orchestrators in three policy
modes; then sends one request per case and prints one JSON document: statuses, bodies, times, counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

import httpx  # noqa: E402
from fixture_tools import weather_server  # noqa: E402

from orchestrator.app import create_app  # noqa: E402
from orchestrator.persist.sqlite import SQLiteStores  # noqa: E402
from orchestrator.settings import OrchestratorSettings  # noqa: E402
from orchestrator.tools import Discovery  # noqa: E402
from orchestrator.worker.scripted import Scenario, ScriptedModel  # noqa: E402
from orchestrator.worker.scripted import build_app as build_worker  # noqa: E402
from tests.support.asgi import serve_asgi  # noqa: E402
from toolkit.mcpwire.http import Pool, Timeouts  # noqa: E402
from toolkit.settings import ToolServerSettings  # noqa: E402

PUBLIC = "1.2.3.4"  # global unicast, but here only an address of the namespace's lo
LO_ADDRESSES = [
    "10.0.0.5",
    "172.16.0.5",
    "192.168.0.5",
    "169.254.169.254",
    "100.64.0.5",
    "100.100.100.200",
    PUBLIC,
    "fd00::5",
    "fd00:ec2::254",
]
HOSTS = [
    ("internal.test", "10.0.0.5"),
    ("meta.test", "169.254.169.254"),
    ("loop.test", "127.0.0.1"),
    ("v6loop.test", "::1"),
    ("mapped.test", "::ffff:127.0.0.1"),
    ("ula.test", "fd00::5"),
    ("public.test", PUBLIC),
    ("pin.test", "127.0.0.1"),
    ("mixed.test", PUBLIC),
    ("mixed.test", "10.0.0.5"),
]
P = 18_555  # the counting listeners' port (a fixed port is fine: nothing else lives in this namespace)

# Refused in the default mode, each with the connection it must not make. {P} is the listeners' port.
REFUSED = {
    "v4-loopback": "http://127.0.0.1:{P}/mcp",
    "v4-loopback-other": "http://127.0.0.2:{P}/mcp",
    "localhost": "http://localhost:{P}/mcp",
    "decimal-integer": "http://2130706433:{P}/mcp",
    "hex-integer": "http://0x7f000001:{P}/mcp",
    "hex-parts": "http://0x7f.1:{P}/mcp",
    "octal-integer": "http://017700000001:{P}/mcp",
    "octal-parts": "http://0177.0.0.1:{P}/mcp",
    "short-form": "http://127.1:{P}/mcp",
    "zero": "http://0:{P}/mcp",
    "unspecified-v4": "http://0.0.0.0:{P}/mcp",
    "v6-loopback": "http://[::1]:{P}/mcp",
    "v6-unspecified": "http://[::]:{P}/mcp",
    "v4-mapped": "http://[::ffff:127.0.0.1]:{P}/mcp",
    "v4-mapped-hex": "http://[::ffff:7f00:1]:{P}/mcp",
    "v4-mapped-private": "http://[::ffff:10.0.0.5]:{P}/mcp",
    "nat64-loopback": "http://[64:ff9b::7f00:1]:{P}/mcp",
    "6to4-loopback": "http://[2002:7f00:1::]:{P}/mcp",
    "v6-link-local": "http://[fe80::1]:{P}/mcp",
    "v6-ula": "http://[fd00::5]:{P}/mcp",
    "v6-metadata": "http://[fd00:ec2::254]:{P}/mcp",
    "private-10": "http://10.0.0.5:{P}/mcp",
    "private-172": "http://172.16.0.5:{P}/mcp",
    "private-192": "http://192.168.0.5:{P}/mcp",
    "metadata": "http://169.254.169.254:{P}/latest/meta-data/",
    "metadata-alibaba": "http://100.100.100.200:{P}/mcp",
    "cgnat": "http://100.64.0.5:{P}/mcp",
    "multicast": "http://224.0.0.1:{P}/mcp",
    "broadcast": "http://255.255.255.255:{P}/mcp",
    "dns-private": "http://internal.test:{P}/mcp",
    "dns-metadata": "http://meta.test:{P}/mcp",
    "dns-loopback": "http://loop.test:{P}/mcp",
    "dns-v6-loopback": "http://v6loop.test:{P}/mcp",
    "dns-mapped": "http://mapped.test:{P}/mcp",
    "dns-ula": "http://ula.test:{P}/mcp",
    "dns-public-and-private": "http://mixed.test:{P}/mcp",
    "v6-link-local-zone": "http://[fe80::1%25lo]:{P}/mcp",
    "dns-unresolvable": "http://nowhere.test:{P}/mcp",
    "userinfo": "http://public.test@127.0.0.1:{P}/mcp",
    "scheme-file": "file:///etc/passwd",
    "scheme-gopher": "gopher://127.0.0.1:{P}/_x",
    "not-a-url": "http://[::1:{P}/mcp",
    # Accepted by the address check but not an MCP server: the same answer as a refusal.
    "public-closed-port": "http://public.test:{CLOSED}/mcp",
    "public-not-mcp": "http://public.test:{P}/mcp",
    "public-redirect-to-loopback": "http://public.test:{REDIRECT}/mcp",
    "denied-by-pattern": "http://public.test:{MCP}/mcp",
}
ACCEPTED = {"public-name": "http://public.test:{MCP}/mcp", "public-literal": "http://1.2.3.4:{MCP}/mcp"}
FORECAST = '<|channel|>commentary to=t.get_forecast <|constrain|>json<|message|>{"city":"Oslo"}<|call|>'
DONE = "<|channel|>final<|message|>Done.<|return|>"


class Counter:
    """Wildcard listeners (v4 and v6) on port P that count connections by the address they reached."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._socks = []
        for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind((host, P))
            s.listen(64)
            self._socks.append(s)
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def _accept(self, s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            local = conn.getsockname()[0]
            self.counts[local] = self.counts.get(local, 0) + 1
            conn.close()  # not an MCP server: the connection closes at once


class Seen:
    """ASGI wrapper of an MCP server: records the local address reached and the Host header of each request."""

    def __init__(self, app: Any, prefix: str = "") -> None:
        self.app, self.prefix, self.requests = app, prefix, []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            self.requests.append({"server": scope["server"][0], "host": headers.get(b"host", b"").decode()})
            if self.prefix:  # a gateway-like front: NS served under /{ns}/mcp
                if not scope["path"].startswith(self.prefix):
                    await send({"type": "http.response.start", "status": 404, "headers": []})
                    return await send({"type": "http.response.body", "body": b""})
                path = scope["path"][len(self.prefix) :]
                scope = {**scope, "path": path, "raw_path": path.encode()}
        await self.app(scope, receive, send)


async def redirector(scope, receive, send) -> None:
    """Answers every request with a redirect to the loopback listener."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        return await send({"type": "lifespan.shutdown.complete"})
    location = f"http://127.0.0.1:{P}/mcp".encode()
    await send({"type": "http.response.start", "status": 307, "headers": [(b"location", location)]})
    await send({"type": "http.response.body", "body": b""})


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ask(url: str, server_url: str | None, label: str = "t") -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "mcp", "server_label": label, "require_approval": "never"}
    if server_url is not None:
        tool["server_url"] = server_url
    start = time.perf_counter()
    r = httpx.post(f"{url}/v1/responses", json={"input": "forecast?", "tools": [tool]}, timeout=60)
    body = r.json()
    calls = [o for o in body.get("output", []) if o.get("type") == "mcp_call"]
    elapsed = round(time.perf_counter() - start, 3)
    return {
        "status": r.status_code,
        "body": body if r.status_code != 200 else None,
        "output": calls[0].get("output") if calls else None,
        "elapsed_s": elapsed,
    }


async def pinned_probe(port: int) -> dict[str, Any]:
    """`pin.test` resolves to loopback here, but a client pinned to 1.2.3.4 must reach 1.2.3.4 only."""
    pool = Pool()  # the pool under the orchestrator's MCP client, pinned as its policy pins it
    try:
        r = await pool.request("GET", f"http://pin.test:{port}/healthz", {}, None, Timeouts(), address=PUBLIC)
        await r.aclose()
    finally:
        pool.close()
    listing = await Discovery().list(f"http://pin.test:{port}/mcp", None, PUBLIC)  # the orchestrator's own client
    return {"status": r.status_code, "listed": listing.name}


def main() -> int:
    counter = Counter()
    closed = free_port(PUBLIC)
    model = ScriptedModel(
        Scenario.from_dict(
            {
                "rules": [
                    {"match": "t.get_forecast to=assistant", "reply": DONE},
                    {"match": "forecast", "reply": FORECAST},
                ]
            }
        )
    )
    public = Seen(weather_server(ToolServerSettings(host=PUBLIC)).build_app())
    private = Seen(weather_server(ToolServerSettings(host="10.0.0.5")).build_app())
    gateway = Seen(weather_server(ToolServerSettings()).build_app(), prefix="/t")
    out: dict[str, Any] = {"cases": {}}
    with contextlib.ExitStack() as stack:
        worker = stack.enter_context(serve_asgi(build_worker(model)))
        mcp_url = stack.enter_context(serve_asgi(public, host=PUBLIC))
        mcp_port = int(mcp_url.rsplit(":", 1)[1])
        redirect_port = int(stack.enter_context(serve_asgi(redirector, host=PUBLIC)).rsplit(":", 1)[1])
        private_url = stack.enter_context(serve_asgi(private, host="10.0.0.5"))
        gateway_url = stack.enter_context(serve_asgi(gateway))
        ports = {"P": P, "CLOSED": closed, "MCP": mcp_port, "REDIRECT": redirect_port}
        base = {"worker_urls": [worker], "date": "2026-12-02", "mcp_refusal_floor_s": 0.3}

        def orchestrator(**extra: Any) -> str:
            app = create_app(OrchestratorSettings(**base, **extra), stores=SQLiteStores())
            return stack.enter_context(serve_asgi(app))

        default = orchestrator(mcp_deny=[f"http://public.test:{mcp_port}/*"])
        plain = orchestrator()
        for name, template in REFUSED.items():
            target = plain if name != "denied-by-pattern" else default
            out["cases"][name] = {"mode": "public", **ask(target, template.format(**ports))}
        for name, template in ACCEPTED.items():
            out["cases"][name] = {"mode": "public", **ask(plain, template.format(**ports))}
        allow = orchestrator(mcp_policy="allowlist", mcp_allow=[f"{private_url}/*"])
        out["cases"]["allowlist-listed-private"] = {"mode": "allowlist", **ask(allow, f"{private_url}/mcp")}
        out["cases"]["allowlist-unlisted-public"] = {
            "mode": "allowlist",
            **ask(allow, f"http://public.test:{mcp_port}/mcp"),
        }
        gw = orchestrator(mcp_policy="gateway-only", tools_url=gateway_url)
        out["cases"]["gateway-only-by-label"] = {"mode": "gateway-only", **ask(gw, None)}
        out["cases"]["gateway-only-fronted-url"] = {"mode": "gateway-only", **ask(gw, f"{gateway_url}/t/mcp")}
        out["cases"]["gateway-only-other-path"] = {"mode": "gateway-only", **ask(gw, f"{gateway_url}/admin/routes")}
        out["cases"]["gateway-only-public"] = {"mode": "gateway-only", **ask(gw, f"http://public.test:{mcp_port}/mcp")}
        out["pinned"] = asyncio.run(pinned_probe(mcp_port))
        out["public_requests"] = public.requests
        out["private_requests"] = private.requests
        out["gateway_requests"] = gateway.requests
        out["mcp_port"] = mcp_port
    out["counts"] = counter.counts
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
