"""The owner header end to end: the orchestrator names the request's key, the gateway forwards it, the tool
server reads it, and nobody else can name an owner (issue 32: per-owner bounds need a trustworthy owner).

Real parts: a python tool server (local backend) and a gateway as subprocesses on loopback, the real MCP SDK
client, and a real orchestrator (in a thread, as the orchestrator suites run it) with two API keys in front of
a scripted worker. What the tool server took each call's owner to be is read from its `tool.call` log lines.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.app import create_app
from orchestrator.guard.auth import key_id
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.worker.scripted import Scenario, ScriptedModel
from orchestrator.worker.scripted import build_app as build_worker
from tests.python_sandbox.conftest import require_backend, server_args
from tests.support.asgi import serve_asgi
from tests.support.gateway import GatewayProc, connect, gateway_config, running_gateway
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service
from toolkit.wire import ANONYMOUS, OWNER_HEADER, sign_owner

KEY_A, KEY_B = "sk-owner-a-" + uuid.uuid4().hex, "sk-owner-b-" + uuid.uuid4().hex
VICTIM = key_id(KEY_B)
OWNERS = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
VISIBLE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=120)
HEX = st.text("0123456789abcdef", min_size=1, max_size=40)
FORGED = st.one_of(
    VISIBLE,  # anything a caller may write
    OWNERS.map(lambda owner: sign_owner(owner, b"another fleet's secret")),
    st.builds(lambda owner, mac: f"{owner}.{mac}", OWNERS, HEX),  # a made-up signature
    OWNERS.map(lambda owner: f"{owner}.{sign_owner(VICTIM).partition('.')[2]}"),  # the victim's signature, moved
    st.sampled_from([".", VICTIM, f"{VICTIM}.", sign_owner(VICTIM) + "0", sign_owner(VICTIM).upper()]),
)
PY_CALL = "<|channel|>analysis to=python<|message|>print(6 * 7)<|call|>"
DONE = "<|channel|>final<|message|>done<|return|>"
EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def python() -> Iterator[Service]:
    require_backend("local")
    with running_service(server_args("local", f"pytest-owner-{uuid.uuid4().hex[:8]}")) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(python: Service) -> Iterator[GatewayProc]:
    with running_gateway(gateway_config({"python": [f"{python.url}/mcp"]})) as gw:
        yield gw


@contextlib.contextmanager
def orchestrating(**tools: Any) -> Iterator[str]:
    """An orchestrator with keys A and B whose model runs one python call, at the tool servers `tools` names."""
    model = ScriptedModel(Scenario.from_dict({"rules": [{"match": "python to=assistant", "reply": DONE}]}))
    model.scenario.default = PY_CALL
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="toolfleet-owner-"))
        worker = stack.enter_context(serve_asgi(build_worker(model)))
        cfg = OrchestratorSettings(
            worker_urls=[worker],
            api_keys=[KEY_A, KEY_B],
            store_path=f"{scratch}/store.sqlite3",
            files_dir=f"{scratch}/files",
            **tools,
        )
        yield stack.enter_context(serve_asgi(create_app(cfg, stores=SQLiteStores())))


@pytest.fixture(scope="module")
def orchestrator(python: Service, gateway: GatewayProc) -> Iterator[dict[str, str]]:
    """Two orchestrators: one reaching the python tool through the gateway, one straight at its URL."""
    with (
        orchestrating(tools_url=gateway.base) as via,
        orchestrating(tools_url=None, python_url=f"{python.url}/mcp") as to,
    ):
        yield {"gateway": via, "direct": to}


def tool_calls(server: Service, since: int = 0) -> list[dict[str, Any]]:
    """The server's `tool.call` log events, from the log's byte `since` on."""
    lines = server.log_path.read_bytes()[since:].decode(errors="replace").splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return [e for e in events if e.get("event") == "tool.call"]


def owners_of(server: Service, session_id: str) -> list[str | None]:
    return [e.get("owner") for e in tool_calls(server) if e.get("session_id") == session_id]


async def cleanup_as(url: str, owner_header: str | None) -> str:
    """One `cleanup_session` call (no sandbox needed) in a session of its own, with this owner header."""
    sid = f"owner-{uuid.uuid4().hex[:10]}"
    headers = {"x-session-id": sid} | ({OWNER_HEADER: owner_header} if owner_header is not None else {})
    async with mcp_session(url, "streamable-http", headers) as session:
        await session.call_tool("cleanup_session", {})
    return sid


@EXAMPLES
@given(value=FORGED)
def test_a_forged_or_garbled_owner_header_makes_a_call_anonymous_never_another_owner(python: Service, value: str):
    sid = anyio.run(cleanup_as, python.url, value)
    assert owners_of(python, sid) == [ANONYMOUS]


@EXAMPLES
@given(owner=OWNERS)
def test_a_signed_owner_header_names_exactly_its_owner(python: Service, owner: str) -> None:
    sid = anyio.run(cleanup_as, python.url, sign_owner(owner))
    assert owners_of(python, sid) == [owner]


async def test_a_call_without_an_owner_header_is_anonymous(python: Service) -> None:
    assert owners_of(python, await cleanup_as(python.url, None)) == [ANONYMOUS]


@pytest.mark.parametrize(
    ("value", "owner"),
    [(sign_owner(VICTIM), VICTIM), (f"{VICTIM}.{'0' * 32}", ANONYMOUS), (sign_owner(VICTIM, b"x" * 32), ANONYMOUS)],
    ids=["signed", "forged", "other-fleet"],
)
async def test_the_gateway_forwards_the_owner_header_and_a_direct_caller_cannot_forge_one(
    python: Service, gateway: GatewayProc, value: str, owner: str
) -> None:
    sid = f"via-gateway-{uuid.uuid4().hex[:8]}"
    headers = {"x-session-id": sid, OWNER_HEADER: value}
    async with connect(gateway.url("python"), "streamable-http", headers=headers) as client:
        await client.call_tool("cleanup_session", {})
    assert owners_of(python, sid) == [owner]


def respond(url: str, key: str, tools: list[dict[str, Any]]) -> httpx.Response:
    body = {"model": "gpt-oss", "input": "run it", "tools": tools}
    return httpx.post(f"{url}/v1/responses", json=body, headers={"authorization": f"Bearer {key}"}, timeout=60)


def python_owners(python: Service, since: int) -> set[str | None]:
    return {e.get("owner") for e in tool_calls(python, since) if e.get("tool") == "python"}


@pytest.mark.parametrize("path", ["gateway", "direct"])
@pytest.mark.parametrize("key", [KEY_A, KEY_B], ids=["key-a", "key-b"])
def test_the_orchestrator_names_the_requests_key_as_the_owner_of_its_tool_calls(
    python: Service, orchestrator: dict[str, str], key: str, path: str
) -> None:
    since = python.log_path.stat().st_size
    answer = respond(orchestrator[path], key, [{"type": "code_interpreter", "container": {"type": "auto"}}])
    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    assert python_owners(python, since) == {key_id(key)}


@pytest.mark.parametrize("path", ["gateway", "direct"])
def test_a_client_cannot_set_the_owner_header_through_the_orchestrator(
    python: Service, orchestrator: dict[str, str], path: str
) -> None:
    """Key A's `mcp` headers for the python namespace name key B, validly signed: the call is refused, or it
    runs as key A; the tool never takes it for B's."""
    since = python.log_path.stat().st_size
    tools = [
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "mcp", "server_label": "python", "headers": {"Toolfleet-Owner": sign_owner(VICTIM)}},
    ]
    answer = respond(orchestrator[path], KEY_A, tools)
    if answer.status_code == 400:
        assert "toolfleet-owner" in answer.json()["error"]["message"].lower()
        assert python_owners(python, since) == set()
    else:
        assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
        assert python_owners(python, since) == {key_id(KEY_A)}
