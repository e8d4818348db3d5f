"""Session handles: minted unguessable, checked by signature, and each kind of bad handle refused in its own words."""

from __future__ import annotations

import pytest

from toolkit.handles import BadHandle, Handles


def test_a_minted_handle_is_owned_by_its_server_only() -> None:
    python, again = Handles("python"), Handles("python")
    handle = python.mint()
    assert handle.startswith("python.") and handle != python.mint()
    assert python.owns(handle) and not again.owns(handle)  # another process (or a restart) has another key
    python.check(handle)


@pytest.mark.parametrize(
    ("mangle", "words"),
    [
        (lambda h: h[:-3] + ("xyz" if not h.endswith("xyz") else "abc"), "not issued by this server"),
        (lambda h: "container" + h[len("python") :], "belongs to the 'container' tools"),
        (lambda h: h.replace(".", "", 1), "is not a session handle"),
        (lambda h: "new-ish", "is not a session handle"),
    ],
)
def test_forged_foreign_and_malformed_handles_are_refused_naming_why(mangle, words) -> None:
    python = Handles("python")
    with pytest.raises(BadHandle, match=words):
        python.check(mangle(python.mint()))
