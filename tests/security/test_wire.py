"""The owner header: signed with the fleet secret, so a caller who reaches the gateway cannot claim another key."""

from hypothesis import given
from hypothesis import strategies as st

from toolkit.wire import ANONYMOUS, is_reserved, read_owner, sign_owner

SECRET = b"s" * 32
OWNERS = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)


@given(OWNERS)
def test_a_signed_owner_reads_back(owner: str) -> None:
    assert read_owner(sign_owner(owner, SECRET), SECRET) == owner


@given(OWNERS, st.text(max_size=80))
def test_an_owner_with_any_other_mac_is_anonymous(owner: str, mac: str) -> None:
    forged = f"{owner}.{mac}"
    if forged != sign_owner(owner, SECRET):
        assert read_owner(forged, SECRET) == ANONYMOUS


def test_another_fleets_signature_does_not_hold() -> None:
    assert read_owner(sign_owner("key1", b"other" * 8), SECRET) == ANONYMOUS
    assert read_owner(None, SECRET) == ANONYMOUS


@given(st.sampled_from(["toolfleet-owner", "TOOLFLEET-room", "X-Sandbox-Memory-MB", "x-sandbox-anything"]))
def test_fleet_prefixes_are_reserved_in_any_case(name: str) -> None:
    assert is_reserved(name)
    assert not is_reserved("x-browser-allowed-domains")
