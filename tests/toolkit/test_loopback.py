"""`toolkit.loopback`: a caller is local only over loopback and unrelayed, whatever else the request holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolkit.loopback import RELAYED, local_caller, loopback

names = st.binary(min_size=1, max_size=20).map(bytes.lower)
headers = st.lists(st.tuples(names, st.binary(max_size=40)), max_size=8)
hosts = st.sampled_from(["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "10.0.0.1", "203.0.113.9", "", "::"])


@given(hosts, headers)
def test_local_is_a_loopback_socket_and_no_relay_header(host: str, extra: list[tuple[bytes, bytes]]) -> None:
    scope = {"type": "http", "client": (host, 5000), "headers": extra}
    assert local_caller(scope) == (loopback(host) and not any(k in RELAYED for k, _ in extra))


@given(hosts, headers, st.sampled_from(RELAYED), st.binary(max_size=40))
def test_any_relay_header_anywhere_makes_a_caller_remote(
    host: str, extra: list[tuple[bytes, bytes]], relay: bytes, value: bytes
) -> None:
    for at in range(len(extra) + 1):
        scope = {"type": "http", "client": (host, 5000), "headers": [*extra[:at], (relay, value), *extra[at:]]}
        assert not local_caller(scope)


def test_loopback_names_and_others() -> None:
    assert all(map(loopback, ["127.0.0.1", "127.255.0.7", "::1", "[::1]", "localhost"]))
    assert not any(map(loopback, ["10.0.0.1", "0.0.0.0", "::", "localhost.evil", "", "127.0.0.1.nip.io"]))
    assert not local_caller({"type": "http", "client": None, "headers": []})  # a Unix socket or a test transport
