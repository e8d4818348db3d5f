"""Issue 32, finding 10: a client's `mcp` tool headers cannot set the fleet's headers, nor smuggle one in.

A built-in label (`python`, `browser`, `container`) sends its headers to the fleet's own tool server, where
`x-sandbox-memory-mb` sized the sandbox; a client-named server gets them as well. Both are checked by one rule
where the request is parsed: a reserved name (any case), a name that is no HTTP token, a value with CR, LF, NUL
or another control, a name the orchestrator or HTTP owns, or one name twice is a 400 naming the header, with
`param` `tools[i].headers`.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from orchestrator import kinds
from orchestrator.errors import RequestError
from orchestrator.kinds.mcp import RESERVED_HEADERS
from orchestrator.request.schema import Toolset
from tests.orchestrator.conftest import make_stack, scripted, tool_urls  # noqa: F401
from toolkit.wire import MEMORY_HEADER, RESERVED_PREFIXES

BUILTIN_LABELS = ("python", "browser", "container")
REMOTE = "http://127.0.0.1:9/mcp"  # never reached: every case here is refused or accepted before a connection
TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
NAMES = st.text(alphabet=TCHAR, min_size=1, max_size=24)
SAFE_VALUES = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
LABELS = st.sampled_from([*BUILTIN_LABELS, "remote"])


def mcp_tool(label: str, headers: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "mcp", "server_label": label, "headers": headers, "require_approval": "never"}
    if label not in BUILTIN_LABELS:
        tool["server_url"] = REMOTE
    return tool


def parse(label: str, headers: dict[str, Any]) -> Toolset:
    """The request's tools as the orchestrator parses them (no gateway: a remote label names its server)."""
    return kinds.toolset([mcp_tool(label, headers)], "auto", lambda ns: None)


def refused(label: str, headers: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as err:
        parse(label, headers)
    assert err.value.param == "tools[0].headers" and err.value.status == 400
    return err.value


def any_case(text: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(text), max_size=len(text)).map(
        lambda upper: "".join(c.upper() if u else c.lower() for c, u in zip(text, upper, strict=True))
    )


RESERVED_NAMES = st.tuples(st.sampled_from(RESERVED_PREFIXES), NAMES).flatmap(
    lambda parts: any_case(parts[0] + parts[1])
)


@given(LABELS, RESERVED_NAMES, SAFE_VALUES)
def test_a_fleet_header_in_any_spelling_is_refused_naming_it(label: str, name: str, value: str) -> None:
    assert name in str(refused(label, {name: value}))


@given(LABELS, NAMES, SAFE_VALUES, st.sampled_from(["\r", "\n", "\0", "\r\n", "\x7f", "\x1b"]), st.data())
def test_a_value_with_cr_lf_nul_or_a_control_is_refused(
    label: str, name: str, value: str, bad: str, data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(value)))
    assert name in str(refused(label, {name: value[:at] + bad + value[at:]}))


@given(LABELS, NAMES, st.sampled_from(["\r", "\n", "\0", " ", ":", "\r\nx-sandbox-memory-mb: 9", "é"]), st.data())
def test_a_name_that_is_no_http_token_is_refused(label: str, name: str, bad: str, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(name)))
    refused(label, {name[:at] + bad + name[at:]: "v"})


@given(LABELS, st.sampled_from(["Host", "content-length", "Transfer-Encoding", "connection", "x-session-id", "TE"]))
def test_headers_http_or_the_orchestrator_owns_are_refused(label: str, name: str) -> None:
    assert name in str(refused(label, {name: "v"}))


@given(LABELS, NAMES)
def test_one_name_in_two_spellings_is_refused(label: str, name: str) -> None:
    assume(name.lower() != name.upper())
    refused(label, {name.lower(): "a", name.upper(): "b"})


@given(LABELS, st.one_of(st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2)))
def test_a_value_that_is_no_string_is_refused(label: str, value: Any) -> None:
    refused(label, {"x-api-key": value})


@given(LABELS, st.dictionaries(NAMES, SAFE_VALUES, max_size=4))
def test_other_headers_reach_the_tool_as_given(label: str, headers: dict[str, str]) -> None:
    names = [n.lower() for n in headers]
    assume(len(set(names)) == len(names))
    assume(not any(n.startswith(RESERVED_PREFIXES) or n in RESERVED_HEADERS for n in names))
    parsed = parse(label, headers)
    sent = parsed.builtins[label] if label in BUILTIN_LABELS else parsed.mcp[label].headers
    assert sent == headers


@settings(max_examples=20)
@given(SAFE_VALUES, st.sampled_from(["\r", "\n", "\0", "\r\nx-sandbox-memory-mb: 9"]), SAFE_VALUES)
def test_an_authorization_token_with_cr_lf_or_nul_is_refused(head: str, bad: str, tail: str) -> None:
    token = head + bad + tail
    with pytest.raises(RequestError) as err:
        kinds.toolset([{**mcp_tool("remote", {}), "authorization": token}], "auto", lambda ns: None)
    assert err.value.param == "tools[0].authorization"


@pytest.mark.parametrize(
    ("label", "name", "value"),
    [
        ("python", MEMORY_HEADER, "65536"),  # the finding: it reached the python tool and sized the sandbox
        ("container", "ToolFleet-Owner", "someone-else.0000"),
        ("weather", "x-api-key", "k\r\nx-sandbox-memory-mb: 65536"),
    ],
)
def test_the_orchestrator_answers_400_naming_the_header(make_stack, tool_urls, label, name, value) -> None:  # noqa: F811
    stack = make_stack()
    tool = {"type": "mcp", "server_label": label, "headers": {name: value}, "require_approval": "never"}
    if label == "weather":
        tool["server_url"] = tool_urls["weather"]
    with pytest.raises(openai.BadRequestError) as err:
        stack.client.responses.create(model="gpt-oss", input="hi", tools=[tool])
    assert err.value.param == "tools[0].headers" and err.value.code is None
    assert repr(name) in err.value.message and err.value.body["type"] == "invalid_request_error"
