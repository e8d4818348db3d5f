"""Which network addresses a service may connect to on someone else's behalf (the SSRF address policy).

Used wherever a URL comes from a model or a client: the browser's page fetch, and the MCP server
URLs clients name to the orchestrator. Only plainly public unicast addresses pass: loopback,
private, link-local, shared (CGNAT), multicast, reserved, unspecified, site-local and cloud
metadata addresses are refused, in v4 and v6, and v6 forms that carry a v4 address (mapped,
compatible, 6to4, NAT64, Teredo) are judged by the v4 address inside. Legacy v4 spellings that the
C resolver accepts (`2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`) are read the way it reads them.

    check_address(ip) -> str | None            # None: public; else why not ("loopback", ...)
    await resolve_checked(host, port) -> ip    # resolve once; refuse if any answer is not public

Callers connect to the address `resolve_checked` returned, never to the name again, so a DNS answer
that changes between the check and the connection (rebinding) cannot move the connection.
"""

from __future__ import annotations

import ipaddress
import socket

import anyio

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Cloud metadata services, named for a clearer reason (the general rules refuse most of them too).
_METADATA = {
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254", "192.0.0.192")
}


class AddressRefused(Exception):
    """The host is not a public address, or does not resolve; the message says why (for logs)."""


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The v4 address a v6 one carries (::ffff:a.b.c.d, ::a.b.c.d, 2002:a.b.c.d::, 64:ff9b::a.b.c.d, Teredo)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address (the server part is public by design)
    packed = int(ip)
    if ip in _NAT64 or (packed >> 32 == 0 and packed > 1):  # NAT64, or the deprecated v4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(packed & 0xFFFFFFFF)
    return None


def check_address(ip: str | IPAddress) -> str | None:
    """None when `ip` is a public unicast address; otherwise the reason it is refused."""
    if isinstance(ip, str):
        try:
            ip = ipaddress.ip_address(ip.split("%", 1)[0])
        except ValueError:
            return f"{ip!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and (inner := _embedded_v4(ip)) is not None:
        reason = check_address(inner)
        return f"{reason} ({ip} embeds {inner})" if reason else None
    checks = (
        (ip in _METADATA, "cloud metadata"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "shared address space (CGNAT)"),
        (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "site-local"),
        (ip.is_reserved, "reserved"),
        (ip.is_private, "private"),
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
    """Resolve `host` once; its first address, if every address it resolves to is public.

    One refused answer refuses the host: a name resolving to both a public and a private address is
    treated as hostile. Raises AddressRefused (also when the name does not resolve)."""
    literal = literal_address(host)
    if literal is not None:
        found = [literal]
    else:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise AddressRefused(f"cannot resolve {host}: {exc}") from None
        found = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
        if not found:
            raise AddressRefused(f"cannot resolve {host}: no address")
    for ip in found:
        if reason := check_address(ip):
            raise AddressRefused(f"{host} resolves to {ip}, which is {reason}")
    return found[0]
