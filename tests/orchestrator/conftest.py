"""A real orchestrator on an ephemeral port, in front of the scripted worker and MCP tool servers."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import openai
import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from fixture_tools import browser_server, container_server, python_server, recording_container_server, weather_server

from orchestrator.app import create_app
from orchestrator.persist import Stores
from orchestrator.persist.sqlite import SQLiteStores
from orchestrator.settings import OrchestratorSettings
from orchestrator.worker.scripted import Scenario, ScriptedModel
from orchestrator.worker.scripted import build_app as build_worker
from tests.support.asgi import serve_asgi
from tests.support.redis import redis_server
from toolkit.settings import ToolServerSettings


def serving(app: Any) -> contextlib.AbstractContextManager[str]:
    """The app on an ephemeral loopback port (the shared helper, which also sets TCP_NODELAY)."""
    return serve_asgi(app)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def scripted() -> Iterator[tuple[str, ScriptedModel]]:
    model = ScriptedModel(Scenario())
    with serving(build_worker(model)) as url:
        yield url, model


@pytest.fixture(scope="session")
def tool_urls() -> Iterator[dict[str, str]]:
    """Fixture MCP servers: browser, python (stand-in), container, and a third-party `weather` server."""
    settings = ToolServerSettings()
    servers = {
        "browser": browser_server(settings),
        "python": python_server(settings),
        "container": container_server(settings),
        "weather": weather_server(settings),
    }
    with contextlib.ExitStack() as stack:
        urls = {ns: stack.enter_context(serving(s.build_app())) + "/mcp" for ns, s in servers.items()}
        yield urls


class Stack:
    """The orchestrator under test, its SDK client and the scripted model behind it."""

    def __init__(self, url: str, model: ScriptedModel, app: Any) -> None:
        self.url = url
        self.model = model
        self.app = app
        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0, timeout=30)

    def script(self, rules: list[tuple[str, str] | dict[str, Any]], default: str | None = None, **extra: Any) -> None:
        self.model.scenario = scenario(rules, default, **extra)


def scenario(rules: list[tuple[str, str] | dict[str, Any]], default: str | None = None, **extra: Any) -> Scenario:
    """Rules as (match, reply) pairs, or dicts with the scripted worker's failure options."""
    data: dict[str, Any] = {"rules": [r if isinstance(r, dict) else {"match": r[0], "reply": r[1]} for r in rules]}
    data.update(extra)
    if default is not None:
        data["default"] = default
    return Scenario.from_dict(data)


@pytest.fixture
def make_stack(scripted, tool_urls):
    started: list[contextlib.ExitStack] = []

    def make(worker_urls: list[str] | None = None, stores: Stores | None = None, **overrides: Any) -> Stack:
        url, model = scripted
        model.scenario = Scenario()
        stack = contextlib.ExitStack()
        started.append(stack)
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="toolfleet-test-"))
        values = {
            "worker_urls": worker_urls or [url],
            "browser_url": tool_urls["browser"],
            "python_url": tool_urls["python"],
            "container_url": tool_urls["container"],
            "tools_url": None,  # each tool server is named above; nothing falls back to a gateway on the fixed port
            "date": "2026-12-02",
            "health_interval_s": 0.5,
            "mcp_allow": ["http://127.0.0.1:*"],  # the fixture MCP servers listen on loopback
            "mcp_refusal_floor_s": 0.0,
            "store_path": f"{scratch}/store.sqlite3",  # any file these settings open; the stack's stores are in memory
            "files_dir": f"{scratch}/files",
            **overrides,
        }
        settings = OrchestratorSettings(**values)
        if stores is None and settings.store != "redis":
            stores = SQLiteStores()
        app = create_app(settings, stores=stores)
        return Stack(stack.enter_context(serving(app)), model, app)

    yield make
    for stack in started:
        stack.close()


@pytest.fixture
def recording_container() -> Iterator[tuple[str, list[str]]]:
    """A container MCP server of its own; the list gets each session key as `cleanup_session` frees it."""
    closed: list[str] = []
    with serving(recording_container_server(ToolServerSettings(), closed).build_app()) as url:
        yield url + "/mcp", closed


@pytest.fixture
def two_workers() -> Iterator[list[tuple[str, ScriptedModel]]]:
    """Two more scripted workers, each with its own scenario and request counters."""
    with contextlib.ExitStack() as stack:
        models = [ScriptedModel(Scenario()), ScriptedModel(Scenario())]
        yield [(stack.enter_context(serving(build_worker(m))), m) for m in models]


@pytest.fixture
def stack(make_stack) -> Stack:
    return make_stack()
