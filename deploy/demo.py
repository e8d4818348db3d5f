"""The demo request: wait for the fleet, then show it answering. Run by deploy/demo.sh.

1. A Responses API request through the official `openai` SDK to the orchestrator: the (SCRIPTED)
   worker calls the `python` tool, which runs through the gateway in a real sandbox container.
2. The python tool over MCP through the gateway directly: a stateful session with a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from openai import OpenAI

CELLS = [
    "import statistics\nprimes = [n for n in range(2, 100) if all(n % d for d in range(2, n))]\nlen(primes)",
    "statistics.mean(primes), primes[-5:]",
    "import matplotlib.pyplot as plt\nplt.plot(primes)\nplt.title('primes below 100')\nprint('figure drawn')",
]


def wait_healthy(urls: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for url in urls:
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: {url} not healthy after {timeout_s:.0f} s")
            time.sleep(1)


def responses_demo(orchestrator: str) -> None:
    client = OpenAI(base_url=f"{orchestrator}/v1", api_key="unused")
    model = client.models.list().data[0].id
    print(f"== POST /v1/responses (model {model!r}, served by the SCRIPTED worker)")
    response = client.responses.create(
        model=model,
        input="Please compute 6 * 7 with python.",
        tools=[{"type": "code_interpreter", "container": {"type": "auto"}}],
    )
    for item in response.output:
        if item.type == "code_interpreter_call":
            logs = " ".join(o.logs for o in item.outputs or [] if o.type == "logs")
            print(f"   code_interpreter_call: {item.code!r} -> {logs.strip()!r} (container {item.container_id})")
        elif item.type == "message":
            print(f"   message: {item.content[0].text!r}")
        else:
            print(f"   {item.type}")
    print(f"   status={response.status} usage: in={response.usage.input_tokens} out={response.usage.output_tokens}")


async def mcp_demo(gateway: str) -> None:
    print(f"== the python tool over MCP through the gateway ({gateway}/python/mcp)")
    client = create_mcp_http_client(headers={"x-session-id": "demo"})
    async with (
        streamable_http_client(f"{gateway}/python/mcp", http_client=client) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        print(f"   connected to namespace {init.server_info.name!r}")
        for code in CELLS:
            result = await session.call_tool("python", {"code": code})
            kinds = ", ".join(c.type for c in result.content)
            print(f"   >>> {code.splitlines()[-1]}\n   {result.content[0].text}   [{kinds}]")
        print("   " + (await session.call_tool("cleanup_session", {})).content[0].text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orchestrator", default="http://127.0.0.1:8080")
    parser.add_argument("--gateway", default="http://127.0.0.1:8800")
    parser.add_argument("--wait-s", type=float, default=180)
    args = parser.parse_args()
    wait_healthy([args.gateway, args.orchestrator], args.wait_s)
    responses_demo(args.orchestrator)
    asyncio.run(mcp_demo(args.gateway))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
