"""Run inside `unshare -n` (a network namespace with only `lo`): the guard against private and metadata addresses.

The namespace's `lo` carries 10.0.0.5 and 169.254.169.254 and the fixture web listens on them, so a
guard that failed would really connect (and the control case shows it would); nothing can leave the
machine from here. Prints one JSON object: {case: [is_error, text]}.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.browser.web import web_app
from tests.support.asgi import serve_asgi
from tests.support.mcp2 import mcp_session

ADDRESSES = ("10.0.0.5/32", "169.254.169.254/32", "100.64.0.9/32")


def cases(web: str) -> dict[str, str]:
    return {
        "metadata": "http://169.254.169.254/latest/meta-data/",
        "private": "http://10.0.0.5/tea",
        "cgnat": "http://100.64.0.9/tea",
        "mapped": "http://[::ffff:10.0.0.5]/tea",
        "nat64": "http://[64:ff9b::a00:5]/tea",
        "v6_private": "http://[fd00::5]/tea",
        "redirect_to_metadata": f"{web}/to?url=http://169.254.169.254/latest/meta-data/",
        "redirect_to_private": f"{web}/to?url=http://10.0.0.5/tea",
    }


async def probe(browser_url: str, targets: dict[str, str]) -> dict[str, list]:
    out: dict[str, list] = {}
    async with mcp_session(browser_url, "streamable-http", {"x-session-id": "netns"}) as session:
        for name, url in targets.items():
            result = await session.call_tool("open", {"id": url})
            out[name] = [result.is_error, result.content[0].text]
    return out


def serve_browser(allow: list[str], index: Path):
    from tools.browser.__main__ import build_browser
    from tools.browser.server import build_server
    from tools.browser.settings import BrowserSettings

    settings = BrowserSettings(
        ssrf_exempt_hosts=allow, index_dir=index, default_corpus_dir=index / "none", fetch_timeout_s=3
    )
    return serve_asgi(build_server(settings, build_browser(settings)).build_app())


def main() -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address in ADDRESSES:
        subprocess.run(["ip", "addr", "add", address, "dev", "lo"], check=True)
    with tempfile.TemporaryDirectory() as tmp, serve_asgi(web_app(), host="0.0.0.0") as web:
        port = web.rsplit(":", 1)[1]
        web = f"http://127.0.0.1:{port}"
        guarded = {name: url.replace("/tea", f":{port}/tea") for name, url in cases(web).items()}
        guarded = {n: u.replace("169.254.169.254/", f"169.254.169.254:{port}/") for n, u in guarded.items()}
        with serve_browser([f"127.0.0.1:{port}"], Path(tmp) / "a") as url:
            out = asyncio.run(probe(url, guarded))
        control = {"control_private": f"http://10.0.0.5:{port}/tea"}
        with serve_browser([f"127.0.0.1:{port}", f"10.0.0.5:{port}"], Path(tmp) / "b") as url:
            out |= asyncio.run(probe(url, control))
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
