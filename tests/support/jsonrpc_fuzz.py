"""Hypothesis strategies for malformed and oversized JSON-RPC, and the check every answer must pass.

Shared by the gateway's fuzz (tests/gateway/test_fuzz.py) and the tool servers' (tests/fuzz/).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from hypothesis import strategies as st

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)
methods = st.sampled_from(["tools/call", "tools/list", "ping", "resources/read", "prompts/get", ""]) | st.text(
    max_size=30
)
"""Never `initialize`: a valid handshake legitimately opens a session, which is not what is fuzzed."""
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | scalars,
        "id": st.integers() | st.text(max_size=10) | json_values,
        "method": methods | json_values,
        "params": json_values | st.fixed_dictionaries({"name": st.text(max_size=20) | json_values}),
    },
)


def bodies(limit: int) -> st.SearchStrategy[bytes]:
    """Bytes, JSON of any shape, JSON-RPC-like envelopes, and bodies over `limit` bytes."""
    oversized = st.integers(limit + 1, limit * 4).map(
        lambda n: b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": "' + b"a" * n
    )
    return st.one_of(
        st.binary(max_size=200),
        json_values.map(lambda v: json.dumps(v).encode()),
        envelopes.map(lambda v: json.dumps(v).encode()),
        oversized,
    )


def check_answer(response: httpx.Response) -> None:
    """A 2xx, or a 4xx whose JSON body is a JSON-RPC error; never a 5xx."""
    assert response.status_code < 500, (response.status_code, response.text[:300])
    if response.status_code >= 400:
        body: Any = response.json()
        assert body.get("jsonrpc") == "2.0" and isinstance(body["error"]["code"], int), body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
