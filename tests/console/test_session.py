"""The session cookie's signature, expiry and key: a forged, expired or orphaned cookie is no session."""

from __future__ import annotations

from unittest import mock

from fastapi import Request

from orchestrator.console import session as sessions
from orchestrator.console.session import COOKIE, ConsoleSessions, csrf_ok
from orchestrator.guard.auth import key_id


def request_with(cookie: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/console", "headers": [(b"cookie", cookie.encode())]})


def test_a_cookie_is_a_session_only_as_signed_unexpired_and_for_a_configured_key() -> None:
    console = ConsoleSessions(["op-1", "op-2"])
    value = console.issue(key_id("op-1"))
    found = console.check(request_with(f"{COOKIE}={value}"))
    assert found is not None and found.admin == key_id("op-1") and "op-1" not in value
    _, expires, nonce, signature = value.split(".")
    forged = f"{key_id('op-2')}.{expires}.{nonce}.{signature}"
    assert console.check(request_with(f"{COOKIE}={forged}")) is None
    tampered = value[:-1] + ("1" if value.endswith("0") else "0")
    assert console.check(request_with(f"{COOKIE}={tampered}")) is None
    assert ConsoleSessions(["op-2"]).check(request_with(f"{COOKIE}={value}")) is None  # the key was removed
    assert ConsoleSessions([]).check(request_with(f"{COOKIE}={value}")) is None  # the console is closed
    with mock.patch.object(sessions.time, "time", return_value=int(expires) + 1):
        assert console.check(request_with(f"{COOKIE}={value}")) is None


def test_the_csrf_token_is_bound_to_the_session_and_compared_whole() -> None:
    console = ConsoleSessions(["op-1"])
    one = console.check(request_with(f"{COOKIE}={console.issue(key_id('op-1'))}"))
    two = console.check(request_with(f"{COOKIE}={console.issue(key_id('op-1'))}"))
    assert one is not None and two is not None and one.csrf != two.csrf
    assert csrf_ok(one.csrf, {"csrf": one.csrf}) and not csrf_ok(one.csrf, {"csrf": two.csrf})
    assert not csrf_ok(one.csrf, {}) and not csrf_ok("", {"csrf": ""})
