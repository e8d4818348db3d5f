"""Schemathesis against the orchestrator's own `/openapi.json`, served by a real process over loopback.

The worker behind it is the SCRIPTED worker (a labelled stand-in for vLLM, also a real process): the
fuzz is about the HTTP surface, not the model. No tools are configured, so generated tool lists are
refused with a 400 rather than called. An API key is set, and half the cases go without it or with a
wrong one, so the 401 path is fuzzed too.

Checks on every answer: no 5xx, an answer within `REQUEST_TIMEOUT_S`, every 4xx/5xx body in OpenAI's
error shape, and schemathesis' schema checks (status, content type and body as documented). Bounded:
a fixed seed (derandomized) and `MAX_EXAMPLES` per operation keep it well under 90 s on two cores.
The test drives schemathesis' strategies with Hypothesis itself: its pytest loader
(`schemathesis.pytest.from_fixture`) fails on pytest 9.2 (`Function` has no `_nodeid`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CheckContext
from schemathesis.specs.openapi.checks import positive_data_acceptance

from orchestrator.guard.auth import OPEN_PATHS
from tests.support.service import Service, running_service

API_KEY = "sk-fuzz-key"
MAX_EXAMPLES = 100
REQUEST_TIMEOUT_S = 10.0
UNAUTHENTICATED = OPEN_PATHS | {"/metrics"}
"""Paths served without a key (`/metrics` because no metrics token is set here)."""


@pytest.fixture(scope="module")
def orchestrator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("openapi-fuzz")
    with running_service(["-m", "orchestrator.worker", "--scripted"]) as worker:
        flags = [
            "-m",
            "orchestrator",
            "--worker-urls",
            json.dumps([worker.url]),
            "--api-keys",
            API_KEY,
            "--store-path",
            str(Path(tmp) / "store.db"),
            "--files-dir",
            str(Path(tmp) / "files"),
        ]
        with running_service(flags) as svc:
            yield svc


def operations(url: str) -> list[Any]:
    """Every operation of the served schema (fetched with the key: `/openapi.json` is behind auth too)."""
    headers = {"authorization": f"Bearer {API_KEY}"}
    loaded = schemathesis.openapi.from_url(f"{url}/openapi.json", headers=headers, timeout=10)
    return [result.ok() for result in loaded.get_all_operations()]


def openai_error_shape(ctx: CheckContext, response: schemathesis.Response, case: schemathesis.Case) -> None:
    """Every error answer is `{"error": {"message", "type", "param", "code"}}`, as OpenAI's API answers."""
    if response.status_code < 400:
        return
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, body
    assert isinstance(error["message"], str) and error["message"], body
    assert isinstance(error["type"], str) and error["type"], body
    assert error["param"] is None or isinstance(error["param"], str), body
    assert error["code"] is None or isinstance(error["code"], str), body


def call_and_check(case: schemathesis.Case, auth: str, url: str) -> None:
    headers = {"authorization": f"Bearer {API_KEY}"} if auth == "key" else {}
    if auth == "wrong":
        headers["authorization"] = "Bearer sk-not-a-key"
    response = case.call(base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S)
    if auth != "key" and case.operation.path not in UNAUTHENTICATED:
        assert response.status_code == 401, (response.status_code, response.text[:300])
    case.validate_response(
        response,
        additional_checks=[openai_error_shape],
        # The schema cannot say every rule (a tool type, a known response id), so valid-looking
        # data may be refused with a 4xx; every other check applies.
        excluded_checks=[positive_data_acceptance],
    )


FUZZ = settings(
    max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_openapi(orchestrator: Service, mode: GenerationMode) -> None:
    sent: Counter[str] = Counter()
    for op in operations(orchestrator.url):

        @FUZZ
        @given(case=op.as_strategy(mode), auth=st.sampled_from(["key", "key", "none", "wrong"]))
        def fuzz(case: schemathesis.Case, auth: str) -> None:
            sent[f"{case.method} {case.path}"] += 1
            call_and_check(case, auth, orchestrator.url)

        try:
            fuzz()
        except Unsatisfiable:
            # Nothing of this operation can be made invalid (no parameters, or only free strings).
            assert mode is GenerationMode.NEGATIVE, op.label
    assert sent["POST /v1/responses"] >= MAX_EXAMPLES // 2, sent
    assert sent["GET /v1/responses/{rid}/input_items"] >= MAX_EXAMPLES // 2, sent


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/nowhere", 404),
        ("PUT", "/v1/responses", 404),
        ("POST", "/v1/responses/nowhere", 404),
        ("GET", "/v1/responses/x/input_items?limit=ten", 400),
    ],
)
def test_routing_errors_in_openai_shape(orchestrator: Service, method: str, path: str, status: int) -> None:
    """What FastAPI answers itself (no route, no method, a bad query value) is in OpenAI's shape too."""
    headers = {"authorization": f"Bearer {API_KEY}"}
    response = httpx.request(method, orchestrator.url + path, headers=headers, timeout=REQUEST_TIMEOUT_S)
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    if status == 400:
        assert body["error"]["param"] == "limit", body
