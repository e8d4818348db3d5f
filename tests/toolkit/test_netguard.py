"""The SSRF address policy: a table of addresses in every written form, and resolution that refuses."""

from __future__ import annotations

import pytest

from toolkit.netguard import AddressRefused, check_address, resolve_checked

REFUSED = {
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


@pytest.mark.parametrize(("address", "reason"), REFUSED.items())
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
    assert await resolve_checked("8.8.8.8", 443) == ["8.8.8.8"]
