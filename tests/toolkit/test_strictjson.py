"""`toolkit.strictjson`: JSON reads as `json.loads` reads it, and what Python reads beyond JSON is one refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.strictjson import NotJson, loads

FINITE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(value=FINITE)
def test_json_reads_as_the_standard_parser_reads_it(value: Any) -> None:
    text = json.dumps(value)
    assert loads(text) == json.loads(text)


@settings(max_examples=100, deadline=None)
@given(value=FINITE, bad=st.sampled_from([float("nan"), float("inf"), float("-inf")]))
def test_a_non_finite_number_anywhere_is_not_json(value: Any, bad: float) -> None:
    with pytest.raises(NotJson, match="not a JSON number"):
        loads(json.dumps([value, {"n": bad}]))  # Python's encoder writes NaN and Infinity; JSON has neither


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("1e999", "out of range"),
        ("[-1" + "0" * 400 + ".5]", "out of range"),
        ("9" * 5000, "digits"),
        ("{", "Expecting"),
    ],
)
def test_each_refusal_says_why(text: str, words: str) -> None:
    with pytest.raises(NotJson, match=words):
        loads(text)


def test_bytes_that_are_not_utf8_are_not_json() -> None:
    with pytest.raises(NotJson):
        loads(b'"\xff"')
