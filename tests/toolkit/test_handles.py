"""Session handles: minted unguessable, checked by signature, and each kind of bad handle refused in its own words."""

from __future__ import annotations

import pytest

from toolkit.handles import BadHandle, Handles


def test_a_minted_handle_is_honoured_across_the_fleet_and_nowhere_else() -> None:
    python, replica, elsewhere = Handles("python"), Handles("python"), Handles("python", b"another fleet's key")
    handle = python.mint()
    assert handle.startswith("python.") and handle != python.mint()
    assert python.owns(handle) and replica.owns(handle)  # another replica (or a restart) shares the fleet's key
    assert not elsewhere.owns(handle)
    replica.check(handle)
    with pytest.raises(BadHandle, match="not issued by this fleet"):
        elsewhere.check(handle)


@pytest.mark.parametrize(
    ("mangle", "words"),
    [
        (lambda h: h[:-3] + ("xyz" if not h.endswith("xyz") else "abc"), "not issued by this fleet"),
        (lambda h: "container" + h[len("python") :], "belongs to the 'container' tools"),
        (lambda h: h.replace(".", "", 1), "is not a session handle"),
        (lambda h: "new-ish", "is not a session handle"),
    ],
)
def test_forged_foreign_and_malformed_handles_are_refused_naming_why(mangle, words) -> None:
    python = Handles("python")
    with pytest.raises(BadHandle, match=words):
        python.check(mangle(python.mint()))
