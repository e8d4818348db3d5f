"""The SSRF guard: loopback refused unless allowlisted, redirects re-checked; private and metadata cases in a netns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.web import web_app
from tests.support.asgi import serve_asgi
from tests.support.mcp2 import mcp_session
from tests.support.service import REPO, Service, running_service


@pytest.fixture(scope="module")
def unguarded(corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A browser with no allowlist: every loopback address is refused."""
    args = ["-m", "tools.browser", "--index-dir", str(tmp_path_factory.mktemp("index")), "--fetch-timeout-s", "3"]
    with running_service(args) as svc:
        yield svc


async def open_error(url: str, target: str) -> str:
    async with mcp_session(url, "streamable-http", {"x-session-id": uuid.uuid4().hex}) as s:
        result = await s.call_tool("open", {"id": target})
    assert result.is_error, result.content[0].text
    return result.content[0].text


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "127.1.2.3", "[::ffff:127.0.0.1]", "0.0.0.0"])
async def test_loopback_is_refused_without_an_allowlist(unguarded: Service, web: str, host: str) -> None:
    port = web.rsplit(":", 1)[1]
    text = await open_error(unguarded.url, f"http://{host}:{port}/tea")
    assert "refused to open" in text and ("loopback" in text or "unspecified" in text)


async def test_a_redirect_from_an_allowlisted_host_to_another_loopback_port_is_refused(
    browser: Service, web: str
) -> None:
    with serve_asgi(web_app()) as other:
        text = await open_error(browser.url, f"{web}/to?url={other}/tea")
    assert f"refused to open {other}/tea" in text and "loopback" in text
    port = web.rsplit(":", 1)[1]
    text = await open_error(browser.url, f"{web}/to?url=http://localhost:{port}/tea")  # same port, other name
    assert "refused to open" in text and "loopback" in text


def test_private_and_metadata_addresses_are_refused_inside_a_namespace_with_only_lo() -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root, unshare and ip to make a network namespace")
    proc = subprocess.run(
        ["unshare", "-n", sys.executable, "-m", "tests.browser.netns_probe"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])  # the last line; logs come before it
    expected = {
        "metadata": "cloud metadata",
        "private": "private",
        "cgnat": "CGNAT",
        "mapped": "embeds 10.0.0.5",
        "nat64": "embeds 10.0.0.5",
        "v6_private": "private",
        "redirect_to_metadata": "cloud metadata",
        "redirect_to_private": "private",
    }
    for case, reason in expected.items():
        is_error, text = out[case]
        assert is_error and "refused to open" in text and reason in text, (case, text)
    is_error, text = out["control_private"]  # the same address, allowlisted: the server there is reachable
    assert not is_error and text.startswith("[0] Tea facts"), text
