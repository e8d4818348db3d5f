"""Fixtures for the gateway tests: real fixture MCP servers and a real gateway process on loopback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:  # `tests.*` imports work however pytest was started
    sys.path.insert(0, _REPO)

from tests.support.gateway import (  # noqa: E402
    TRANSPORTS,
    GatewayProc,
    Upstream,
    fixtures,
    gateway_config,
    running_gateway,
)


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[Upstream]]:
    with fixtures("r1", "r2") as ups:
        yield ups


@pytest.fixture(scope="module")
def gateway(replicas: list[Upstream]) -> Iterator[GatewayProc]:
    cfg = gateway_config({"fixture": [u.url for u in replicas]})
    with running_gateway(cfg) as gw:
        yield gw


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return request.param
