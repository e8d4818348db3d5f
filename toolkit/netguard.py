"""Which network addresses a server may connect to on a caller's behalf (the SSRF address policy).

Used wherever a URL comes from a model or a client: the browser's page fetch, and MCP server URLs
named by clients. The policy refuses every address that is not plainly public: loopback, private,
link-local, shared (CGNAT), multicast, reserved, unspecified and cloud metadata, in v4 and v6,
including v4 addresses written in v6 form (mapped, compatible, 6to4, NAT64, Teredo).
"""

from __future__ import annotations

import ipaddress
import socket

import anyio

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

_METADATA = {
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack
    ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    ipaddress.ip_address("fd00:ec2::254"),  # AWS IMDS over IPv6
}
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(Exception):
    """A host resolved to an address the policy refuses, or did not resolve at all."""


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The v4 address a v6 one carries (::ffff:a.b.c.d, ::a.b.c.d, 2002:a.b.c.d::, 64:ff9b::a.b.c.d, Teredo)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    packed = int(ip)
    if ip in _NAT64 or (packed >> 32 == 0 and packed > 1):  # NAT64, or the deprecated v4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(packed & 0xFFFFFFFF)
    return None


def check_address(ip: str | IP) -> str | None:
    """Why a connection to `ip` is refused, or None when the address is public."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0] if isinstance(ip, str) else ip)
    except ValueError:
        return f"{ip!r} is not an IP address"
    if isinstance(addr, ipaddress.IPv6Address) and (inner := _embedded_v4(addr)) is not None:
        reason = check_address(inner)
        return f"{addr} embeds {inner}: {reason}" if reason else None
    checks = (
        (addr in _METADATA, "a cloud metadata address"),
        (addr.is_loopback, "a loopback address"),
        (addr.is_unspecified, "the unspecified address"),
        (addr.is_link_local, "a link-local address"),
        (addr.is_multicast, "a multicast address"),
        (isinstance(addr, ipaddress.IPv4Address) and addr in _CGNAT, "a shared (CGNAT) address"),
        (addr.is_reserved, "a reserved address"),
        (addr.is_private, "a private address"),
        (not addr.is_global, "not a public address"),
    )
    for refused, reason in checks:
        if refused:
            return f"{addr} is {reason}"
    return None


async def resolve_checked(host: str, port: int) -> list[str]:
    """Resolve `host` once and return its addresses, all of which the policy allows (else AddressRefused).

    One refused answer refuses the host: a name that resolves to both a public and a private address
    is treated as hostile. Connect to one of the returned addresses, never to the name again."""
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise AddressRefused(f"cannot resolve {host}: {exc.strerror or exc}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        if reason := check_address(address):
            raise AddressRefused(reason if address == host.strip("[]") else f"{host} resolves to {reason}")
    if not addresses:
        raise AddressRefused(f"{host} has no address")
    return addresses
