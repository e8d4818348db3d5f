"""toolkit.netguard as tables: which addresses are public, in every spelling, and resolution that refuses."""

from __future__ import annotations

import ipaddress

import anyio
import pytest

from toolkit.netguard import AddressRefused, check_address, literal_address, resolve_checked

REFUSED = {
    "127.0.0.1": "loopback",
    "127.255.0.9": "loopback",
    "2130706433": "loopback",
    "0x7f000001": "loopback",
    "0x7f.1": "loopback",
    "0177.0.0.1": "loopback",
    "017700000001": "loopback",
    "127.1": "loopback",
    "::1": "loopback",
    "[::1]": "loopback",
    "::ffff:127.0.0.1": "loopback",
    "::ffff:7f00:1": "loopback",
    "64:ff9b::7f00:1": "loopback",
    "2002:7f00:1::": "loopback",
    "0.0.0.0": "unspecified",
    "0": "unspecified",
    "::": "unspecified",
    "10.1.2.3": "private",
    "172.31.0.1": "private",
    "192.168.1.1": "private",
    "::ffff:10.0.0.1": "private",
    "64:ff9b::a00:1": "private",
    "fc00::1": "private",
    "fd12::1": "private",
    "169.254.169.254": "cloud metadata",
    "100.100.100.200": "cloud metadata",
    "fd00:ec2::254": "cloud metadata",
    "169.254.1.1": "link-local",
    "fe80::1": "link-local",
    "100.64.0.1": "shared address space (CGNAT)",
    "224.0.0.1": "multicast",
    "ff02::1": "multicast",
    "fec0::1": "site-local",
    "255.255.255.255": "reserved",
    "198.51.100.7": "private",
    "240.0.0.1": "reserved",
    "::127.0.0.1": "loopback",
}
PUBLIC = ["1.2.3.4", "8.8.8.8", "2606:4700::1111", "::ffff:1.2.3.4", "2002:102:304::", "64:ff9b::102:304"]


@pytest.mark.parametrize(("host", "reason"), sorted(REFUSED.items()))
def test_every_non_public_spelling_is_refused_with_its_reason(host, reason):
    ip = literal_address(host)
    assert ip is not None, host
    assert (check_address(ip) or "").startswith(reason), (host, check_address(ip))
    with pytest.raises(AddressRefused):
        anyio.run(resolve_checked, host)


@pytest.mark.parametrize("host", PUBLIC)
def test_public_unicast_addresses_pass(host):
    ip = literal_address(host)
    assert ip is not None and check_address(ip) is None
    assert anyio.run(resolve_checked, host) == ip


def test_names_are_not_literals_and_integer_spellings_read_as_the_resolver_reads_them():
    assert literal_address("example.test") is None and literal_address("1.2.3.4.5") is None
    assert literal_address("16909060") == ipaddress.ip_address("1.2.3.4")
    assert literal_address("0x01020304") == ipaddress.ip_address("1.2.3.4")


REFUSED_FORMS = {
    "127.0.0.1": "loopback",
    "127.5.6.7": "loopback",
    "::1": "loopback",
    "10.1.2.3": "private",
    "172.16.0.9": "private",
    "192.168.1.1": "private",
    "fc00::1": "private",
    "169.254.169.254": "metadata",
    "fd00:ec2::254": "metadata",
    "100.100.100.200": "metadata",
    "169.254.10.10": "link-local",
    "fe80::1": "link-local",
    "fe80::1%lo": "link-local",
    "100.64.1.1": "CGNAT",
    "224.0.0.1": "multicast",
    "ff02::1": "multicast",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "240.0.0.1": "reserved",
    "::ffff:127.0.0.1": "embeds 127.0.0.1",
    "::ffff:169.254.169.254": "metadata",
    "::127.0.0.1": "embeds 127.0.0.1",
    "2002:7f00:1::": "embeds 127.0.0.1",
    "64:ff9b::10.0.0.1": "embeds 10.0.0.1",
    "2001:0:4136:e378:8000:63bf:f5ff:fffe": "embeds 10.0.0.1",  # Teredo: client 10.0.0.1, bits inverted
    "not-an-ip": "not an IP address",
}
ALLOWED = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "2002:808:808::"]


@pytest.mark.parametrize(("address", "reason"), REFUSED_FORMS.items())
def test_non_public_addresses_are_refused_with_a_reason(address: str, reason: str) -> None:
    assert reason in (check_address(address) or "")


@pytest.mark.parametrize("address", ALLOWED)
def test_public_addresses_pass(address: str) -> None:
    assert check_address(address) is None


async def test_resolve_checked_refuses_a_name_that_resolves_to_loopback() -> None:
    with pytest.raises(AddressRefused, match=r"localhost resolves to .* loopback"):
        await resolve_checked("localhost", 80)


async def test_resolve_checked_refuses_a_literal_private_address_and_an_unknown_name() -> None:
    with pytest.raises(AddressRefused, match="private"):
        await resolve_checked("10.0.0.1", 80)
    with pytest.raises(AddressRefused, match="cannot resolve"):
        await resolve_checked("no-such-host.invalid", 80)


async def test_resolve_checked_returns_the_public_literal_without_dns() -> None:
    assert await resolve_checked("8.8.8.8", 443) == ipaddress.ip_address("8.8.8.8")
