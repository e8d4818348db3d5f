"""The MCP server_url policy's decisions that need no network (no case resolves a name): schemes, patterns, modes."""

from __future__ import annotations

import anyio
import pytest

from orchestrator.guard.mcp_policy import McpPolicy, ServerRefused


def verdict(policy: McpPolicy, url: str) -> str:
    try:
        return anyio.run(policy.check, url).reason
    except ServerRefused as exc:
        return f"refused: {exc}"


GATEWAY = "http://gateway.internal:8800"


@pytest.mark.parametrize(
    ("policy", "url", "expected"),
    [
        (McpPolicy(allow=("https://mcp.example.com/*",)), "https://mcp.example.com/mcp", "matches mcp_allow"),
        (McpPolicy(allow=("https://mcp.example.com/*",)), "https://mcp.example.com:443/mcp", "matches mcp_allow"),
        (McpPolicy(allow=("https://mcp.example.com:443/*",)), "https://MCP.example.com/mcp", "matches mcp_allow"),
        (
            McpPolicy("allowlist", allow=("https://mcp.example.com/*",)),
            "https://mcp.example.com:8443/mcp",
            "refused: mode allowlist",
        ),
        (
            McpPolicy(allow=("https://*.example.com/*",), deny=("https://evil.example.com/*",)),
            "https://evil.example.com/mcp",
            "refused: matches mcp_deny",
        ),
        (McpPolicy(mode="allowlist"), "https://mcp.example.com/mcp", "refused: mode allowlist admits no other server"),
        (McpPolicy(mode="gateway-only", gateway_url=GATEWAY), f"{GATEWAY}/github/mcp", "fronted by the gateway"),
        (McpPolicy(mode="gateway-only", gateway_url=GATEWAY), f"{GATEWAY}/admin", "refused: mode gateway-only"),
        (McpPolicy(mode="gateway-only", gateway_url=GATEWAY), f"{GATEWAY}/admin/mcp", "refused: mode gateway-only"),
        (McpPolicy(mode="gateway-only", gateway_url=GATEWAY), f"{GATEWAY}/adminx/mcp", "refused: mode gateway"),
        (McpPolicy(mode="gateway-only", gateway_url=GATEWAY), f"{GATEWAY}/%61dmin/mcp", "refused: mode gateway"),
        (McpPolicy(mode="gateway-only", gateway_url=f"{GATEWAY}/"), f"{GATEWAY}/git_hub/mcp", "fronted by the"),
        (McpPolicy(mode="gateway-only", gateway_url=GATEWAY), f"{GATEWAY}/github/mcp?x=1", "refused: mode gateway"),
        (McpPolicy(mode="gateway-only", gateway_url=GATEWAY), f"{GATEWAY}/a/b/mcp", "refused: mode gateway-only"),
        (
            McpPolicy(mode="gateway-only", gateway_url=GATEWAY),
            "http://gateway.internal:8801/github/mcp",
            "refused: mode gateway-only",
        ),
        (McpPolicy(), "ftp://mcp.example.com/mcp", "refused: not an http(s) URL"),
        (McpPolicy(), "http://user:pw@mcp.example.com/mcp", "refused: not an http(s) URL"),
        (McpPolicy(), "http:///mcp", "refused: not an http(s) URL"),
        (McpPolicy(), "http://1.2.3.4/mcp", "public address"),
    ],
)
def test_policy_decisions(policy, url, expected):
    assert verdict(policy, url).startswith(expected)


def test_a_public_literal_is_pinned_to_its_address():
    assert anyio.run(McpPolicy().check, "http://1.2.3.4:9000/mcp").address == "1.2.3.4"
    assert anyio.run(McpPolicy(allow=("http://1.2.3.4:9000/*",)).check, "http://1.2.3.4:9000/mcp").address is None
