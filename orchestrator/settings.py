"""Orchestrator settings: every one a flag and a `TOOLFLEET_ORCHESTRATOR_` environment variable."""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from toolkit.settings import ServiceSettings


class OrchestratorSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_ORCHESTRATOR_", cli_kebab_case=True, extra="ignore")

    port: int = Field(8080, description="port to bind")
    worker_urls: list[str] = Field(["http://127.0.0.1:8000"], description="vLLM worker base URLs")
    model: str | None = Field(None, description="model name to send (default: what the worker lists)")
    tools_url: str | None = Field(
        "http://127.0.0.1:8800", description="gateway base URL: namespace NS is at {url}/NS/mcp; '' = no gateway"
    )
    browser_url: str | None = Field(None, description="browser MCP endpoint (overrides --tools-url)")
    python_url: str | None = Field(None, description="python MCP endpoint (overrides --tools-url)")
    container_url: str | None = Field(None, description="container MCP endpoint (overrides --tools-url)")
    store: str = Field("sqlite", description="response store: sqlite or redis")
    store_path: str = Field(
        str(Path(tempfile.gettempdir()) / "toolfleet-orchestrator.sqlite3"), description="SQLite file"
    )
    redis_url: str | None = Field(None, description="Redis URL when --store redis (default redis://127.0.0.1:6379/0)")
    redis_prefix: str = Field("toolfleet:", description="key prefix in Redis (replicas sharing responses use the same)")
    max_responses: int = Field(10_000, description="keep at most this many stored responses")
    retention_s: float = Field(30 * 86400, description="drop stored responses older than this")
    max_output_tokens: int = Field(16_384, description="token budget of a response when the request sets none")
    max_tool_calls: int = Field(32, description="tool calls per response when the request sets none")
    tool_timeout_s: float = Field(120.0, description="give up on one tool call after this long")
    session_idle_s: float = Field(1200.0, description="clean up a stored conversation's tool sessions when idle")
    reap_interval_s: float = Field(60.0, description="how often idle conversations are looked for")
    cancel_poll_s: float = Field(0.5, description="how often cancels asked of another replica are looked for")
    identity: str | None = Field(None, description="model identity line of the system message")
    date: str | None = Field(None, description="conversation start date (default: today)")
    health_interval_s: float = Field(5.0, description="worker health-check period")

    def endpoint_overrides(self) -> dict[str, str]:
        pairs = {"browser": self.browser_url, "python": self.python_url, "container": self.container_url}
        return {k: v for k, v in pairs.items() if v}
