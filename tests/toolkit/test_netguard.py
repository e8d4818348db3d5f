"""toolkit.netguard as a table: which addresses are public, in every spelling (pure functions: no traffic)."""

from __future__ import annotations

import ipaddress

import anyio
import pytest

from toolkit.netguard import AddressRefused, literal_address, resolve_checked, why_not_public

REFUSED = {
    "127.0.0.1": "loopback", "127.255.0.9": "loopback", "2130706433": "loopback", "0x7f000001": "loopback",
    "0x7f.1": "loopback", "0177.0.0.1": "loopback", "017700000001": "loopback", "127.1": "loopback",
    "::1": "loopback", "[::1]": "loopback", "::ffff:127.0.0.1": "loopback", "::ffff:7f00:1": "loopback",
    "64:ff9b::7f00:1": "loopback", "2002:7f00:1::": "loopback", "0.0.0.0": "unspecified", "0": "unspecified",
    "::": "unspecified", "10.1.2.3": "private", "172.31.0.1": "private", "192.168.1.1": "private",
    "::ffff:10.0.0.1": "private", "64:ff9b::a00:1": "private", "fc00::1": "private", "fd12::1": "private",
    "169.254.169.254": "cloud metadata", "100.100.100.200": "cloud metadata", "fd00:ec2::254": "cloud metadata",
    "169.254.1.1": "link-local", "fe80::1": "link-local", "100.64.0.1": "shared address space (CGNAT)",
    "224.0.0.1": "multicast", "ff02::1": "multicast", "fec0::1": "site-local", "255.255.255.255": "private",
    "198.51.100.7": "private", "240.0.0.1": "private", "::127.0.0.1": "reserved",
}  # fmt: skip
PUBLIC = ["1.2.3.4", "8.8.8.8", "2606:4700::1111", "::ffff:1.2.3.4", "2002:102:304::", "64:ff9b::102:304"]


@pytest.mark.parametrize(("host", "reason"), sorted(REFUSED.items()))
def test_every_non_public_spelling_is_refused_with_its_reason(host, reason):
    ip = literal_address(host)
    assert ip is not None, host
    assert (why_not_public(ip) or "").startswith(reason), (host, why_not_public(ip))
    with pytest.raises(AddressRefused):
        anyio.run(resolve_checked, host)


@pytest.mark.parametrize("host", PUBLIC)
def test_public_unicast_addresses_pass(host):
    ip = literal_address(host)
    assert ip is not None and why_not_public(ip) is None
    assert anyio.run(resolve_checked, host) == ip


def test_names_are_not_literals_and_integer_spellings_read_as_the_resolver_reads_them():
    assert literal_address("example.test") is None and literal_address("1.2.3.4.5") is None
    assert literal_address("16909060") == ipaddress.ip_address("1.2.3.4")
    assert literal_address("0x01020304") == ipaddress.ip_address("1.2.3.4")
