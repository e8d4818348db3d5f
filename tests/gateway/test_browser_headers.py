"""The gateway's default header policy for `browser` forwards the browser's request options."""

from __future__ import annotations

from gateway.config import BROWSER_OPTIONS, parse_config
from gateway.headers import HeaderRules

OPTIONS = [(name.encode(), b"v") for name in BROWSER_OPTIONS]


def rules(text: str, ns: str) -> HeaderRules:
    return HeaderRules(parse_config(text).namespaces[ns].headers)


def test_browser_forwards_its_option_headers_by_default_and_other_namespaces_do_not() -> None:
    text = "namespaces: {browser: {replicas: ['http://b:8801/mcp']}, python: {replicas: ['http://p:8802/mcp']}}"
    assert rules(text, "browser").apply([*OPTIONS, (b"x-session-id", b"s")]) == {
        **{name: "v" for name in BROWSER_OPTIONS},
        "x-session-id": "s",
    }
    assert rules(text, "python").apply(OPTIONS) == {}


def test_an_operators_own_forward_list_is_kept_as_written() -> None:
    text = "namespaces: {browser: {replicas: ['http://b:8801/mcp'], headers: {forward: [x-session-id]}}}"
    assert rules(text, "browser").apply(OPTIONS) == {}
