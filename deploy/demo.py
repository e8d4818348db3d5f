"""The demo request: wait for the fleet, then show it answering. Run by deploy/demo.sh.

Today it drives the python tool over MCP (streamable HTTP): a stateful session that computes,
keeps a variable across calls, plots, and is cleaned up.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

CELLS = [
    "import statistics\nprimes = [n for n in range(2, 100) if all(n % d for d in range(2, n))]\nlen(primes)",
    "statistics.mean(primes), primes[-5:]",
    "import matplotlib.pyplot as plt\nplt.plot(primes)\nplt.title('primes below 100')\nprint('figure drawn')",
]


def wait_healthy(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"demo: {url} not healthy after {timeout_s:.0f} s")


async def python_demo(url: str) -> None:
    client = create_mcp_http_client(headers={"x-session-id": "demo"})
    async with streamable_http_client(f"{url}/mcp", http_client=client) as (read, write, *_), \
            ClientSession(read, write) as session:
        init = await session.initialize()
        print(f"connected to MCP server {init.server_info.name!r}")
        for code in CELLS:
            result = await session.call_tool("python", {"code": code})
            kinds = ", ".join(c.type for c in result.content)
            print(f">>> {code.splitlines()[-1]}\n{result.content[0].text}   [{kinds}]")
        print((await session.call_tool("cleanup_session", {})).content[0].text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-url", default="http://127.0.0.1:8802")
    parser.add_argument("--wait-s", type=float, default=120)
    args = parser.parse_args()
    wait_healthy(args.python_url, args.wait_s)
    asyncio.run(python_demo(args.python_url))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
