"""Which MCP servers a client may name in `tools[type=mcp].server_url`, and how the orchestrator connects.

The orchestrator opens connections on the client's behalf, so a `server_url` is a request to reach
some address from inside the fleet. The policy, in order:

1. The URL must be `http` or `https`, name a host and carry no user-info.
2. `mcp_deny` patterns refuse it; `mcp_allow` patterns accept it (the operator's word, no address check).
3. A URL the gateway fronts (`{tools_url}/{namespace}/mcp`, plainly spelled, no `/admin...`) is accepted.
4. Otherwise the mode decides: `public` (default) resolves the host once and accepts it only when every
   address is public (`toolkit.netguard`); `allowlist` and `gateway-only` refuse it.

A server accepted by address is then reached at that address only (the MCP client's pool connects to the
`Verdict`'s address, the URL's host stays in `Host` and TLS SNI, and no redirect is followed), so DNS cannot
move it afterwards.
Every refusal, and every accepted server that does not answer its tool listing, gets the same 400
no sooner than `mcp_refusal_floor_s`: the client learns nothing about addresses, names or ports.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

import httpx2

from orchestrator.errors import RequestError
from orchestrator.settings import OrchestratorSettings
from toolkit.netguard import AddressRefused, resolve_checked

_DEFAULT_PORTS = {"http": 80, "https": 443}
_GATEWAY_PATH = re.compile(r"/[A-Za-z_][A-Za-z0-9_]*/mcp")


class ServerRefused(Exception):
    """The policy refuses a server_url; the message is for the log only (the client gets `refusal`)."""


def refusal(label: str) -> RequestError:
    """The one error every refused or unreachable client-named MCP server gets."""
    message = f"MCP server {label!r} is not available: its server_url is not allowed or did not answer"
    return RequestError(message, "tools", 400, "mcp_server_unavailable")


@dataclass(frozen=True)
class Verdict:
    """An accepted server: `address` is the IP to connect to, None to connect by name (a trusted URL)."""

    address: str | None
    reason: str


@dataclass(frozen=True)
class McpPolicy:
    mode: str = "public"
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    gateway_url: str | None = None
    floor_s: float = 0.5

    @classmethod
    def from_settings(cls, s: OrchestratorSettings) -> McpPolicy:
        return cls(s.mcp_policy, tuple(s.mcp_allow), tuple(s.mcp_deny), s.tools_url, s.mcp_refusal_floor_s)

    async def check(self, url: str) -> Verdict:
        """Raises ServerRefused (with the reason, for logs) when the client may not use `url`."""
        try:
            parsed = httpx2.URL(url)
        except Exception:
            raise ServerRefused("not a URL") from None
        if parsed.scheme not in _DEFAULT_PORTS or not parsed.host or parsed.userinfo:
            raise ServerRefused("not an http(s) URL with a host and no user-info")
        spellings = _spellings(parsed)
        if any(fnmatch.fnmatchcase(s, p) for p in self.deny for s in spellings):
            raise ServerRefused("matches mcp_deny")
        if any(fnmatch.fnmatchcase(s, p) for p in self.allow for s in spellings):
            return Verdict(None, "matches mcp_allow")
        if self._fronted(parsed):
            return Verdict(None, "fronted by the gateway")
        if self.mode != "public":
            raise ServerRefused(f"mode {self.mode} admits no other server")
        try:
            address = await resolve_checked(parsed.host, parsed.port or _DEFAULT_PORTS[parsed.scheme])
        except AddressRefused as exc:
            raise ServerRefused(str(exc)) from None
        return Verdict(str(address), "public address")

    def _fronted(self, url: httpx2.URL) -> bool:
        if not self.gateway_url:
            return False
        base = httpx2.URL(self.gateway_url.rstrip("/"))
        same_origin = _origin(url) == _origin(base)
        prefix = base.path.rstrip("/")
        rest = url.path[len(prefix) :] if url.path.startswith(prefix) else ""
        plain = url.raw_path.decode("ascii", "replace") == url.path  # no query, no percent-encoding
        # The gateway treats every path under /admin as its operator API: never a namespace of clients.
        return same_origin and plain and bool(_GATEWAY_PATH.fullmatch(rest)) and not rest.startswith("/admin")


def _origin(url: httpx2.URL) -> tuple[str, str, int]:
    return url.scheme, url.host.lower(), url.port or _DEFAULT_PORTS.get(url.scheme, 0)


def _spellings(url: httpx2.URL) -> list[str]:
    """The URL as patterns match it: `scheme://host:port/path?query`, and without the port when default."""
    scheme, host, port = _origin(url)
    host = f"[{host}]" if ":" in host else host
    tail = url.raw_path.decode("ascii", "replace")
    out = [f"{scheme}://{host}:{port}{tail}"]
    if port == _DEFAULT_PORTS[scheme]:
        out.append(f"{scheme}://{host}{tail}")
    return out
