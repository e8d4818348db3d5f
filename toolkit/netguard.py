"""Which network addresses a service may connect to on a client's behalf: public unicast only.

Two functions, used wherever a client names a URL the service then opens (an MCP `server_url`):

    why_not_public(ip) -> str | None           # None: public; else why not ("loopback", "private", ...)
    await resolve_checked(host) -> ip_address  # resolve once, refuse if any answer is not public

The caller connects to the address `resolve_checked` returned (never to the name again), so a
DNS answer that changes between the check and the connection (rebinding) cannot move it.
IPv6 forms that carry an IPv4 address (mapped `::ffff:a.b.c.d`, 6to4, Teredo, NAT64 `64:ff9b::/96`)
are judged by the IPv4 address inside them; legacy IPv4 spellings that the C resolver accepts
(`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`) are read the same way it reads them.
"""

from __future__ import annotations

import ipaddress
import socket

import anyio

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Cloud metadata services: named for a clearer log reason (each is refused by the general rules too).
_METADATA = {
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "192.0.0.192")
}


class AddressRefused(Exception):
    """The host is not a public address, or does not resolve; the message says why (for logs, not clients)."""


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address (the server part is public by design)
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def why_not_public(ip: IPAddress) -> str | None:
    """None when `ip` is a public unicast address; otherwise the reason it is refused."""
    if isinstance(ip, ipaddress.IPv6Address) and (inner := _embedded_v4(ip)) is not None:
        reason = why_not_public(inner)
        return f"{reason} (embedded in {ip})" if reason else None
    checks = (
        (ip in _METADATA, "cloud metadata"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "shared address space (CGNAT)"),
        (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "site-local"),
        (ip.is_private, "private"),
        (ip.is_reserved, "reserved"),
        (not ip.is_global, "not globally routable"),
    )
    return next((reason for refused, reason in checks if refused), None)


def literal_address(host: str) -> IPAddress | None:
    """`host` as an IP address when it is one in any spelling the resolver accepts, else None (a name)."""
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare.split("%")[0])
    except ValueError:
        pass
    try:  # inet_aton accepts the legacy forms: one integer, hex and octal parts, fewer than four parts
        return ipaddress.IPv4Address(socket.inet_aton(bare))
    except OSError:
        return None


async def resolve_checked(host: str, port: int | None = None) -> IPAddress:
    """Resolve `host` once; the first address, if every address it resolves to is public.

    Raises AddressRefused otherwise (or when it does not resolve)."""
    literal = literal_address(host)
    if literal is not None:
        found = [literal]
    else:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise AddressRefused(f"{host!r} does not resolve: {exc}") from None
        found = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
        if not found:
            raise AddressRefused(f"{host!r} does not resolve")
    for ip in found:
        if reason := why_not_public(ip):
            raise AddressRefused(f"{host!r} resolves to {ip}, which is {reason}")
    return found[0]
