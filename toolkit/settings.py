"""Settings shared by the tool servers: one name per setting, as a flag and as an environment variable."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Self

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    """Base of every service's settings: `--port` is also `TOOLFLEET_<SERVICE>_PORT`."""

    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_", cli_kebab_case=True, extra="ignore")

    host: str = Field("127.0.0.1", description="address to bind")
    port: int = Field(0, description="port to bind")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    tracing: bool = Field(True, description="OpenTelemetry spans and trace ids in logs (off: no-op tracer)")
    otlp_endpoint: str | None = Field(
        None, description="OTLP/HTTP traces URL to export spans to (needs the otlp extra); unset = no export"
    )
    drain_s: float = Field(
        10.0,
        description="on SIGTERM: a tool server serves the sessions it holds (calls in flight and follow-ups) for"
        " up to this long while it takes no new one, then stops; any other service stops taking connections at"
        " once and gives requests in flight this long to finish; what is left of the stop grace period (30 s in"
        " compose.yaml) goes to removing the sessions' sandboxes",
    )

    @classmethod
    def from_args(cls, argv: Sequence[str] | None, prog: str) -> Self:
        """Parse flags over environment variables over defaults."""
        return cls(_cli_parse_args=list(argv or []), _cli_prog_name=prog)


class ToolServerSettings(ServiceSettings):
    """What every MCP tool server built on the kit accepts."""

    session_ttl_s: float = Field(
        1800.0,
        description="reap sessions idle longer than this; idle order: keep it above the gateway's pin idle"
        " (1500) and the orchestrator's conversation idle (1200), so the conversation's owner cleans up first",
    )
    reap_interval_s: float = Field(30.0, description="how often idle sessions are looked for")
    max_sessions: int = Field(
        256,
        ge=1,
        description="sessions held at most, of all callers: the last resort, a new session past it is refused"
        " (no caller's session is evicted for another's)",
    )
    max_sessions_per_owner: int = Field(
        64,
        ge=1,
        description="sessions one owner (API key; all unsigned callers are one) holds at most: its new one past"
        " it evicts that owner's own least recently used idle session (capped at --max-sessions)",
    )
    task_ttl_s: float = Field(
        3600.0,
        gt=0,
        description="an MCP task (a long call made a task) is kept this long from its creation, then removed; its"
        " work is cancelled (its sandbox's process killed) if it still runs: keep it above the tools' timeouts",
    )
    max_tasks_per_owner: int = Field(
        16,
        ge=1,
        description="MCP tasks one owner (API key) runs at once: more are refused (a finished task, kept until its"
        " ttl, no longer counts); across the fleet with --task-counts-url, else on each replica",
    )
    task_counts_url: str | None = Field(
        None,
        description="Redis URL where every replica counts its owners' running MCP tasks, so --max-tasks-per-owner"
        " holds across the fleet (a killed replica's counts lapse in 30 s); unset: each replica counts its own",
    )
    max_body_bytes: int = Field(4 * 1024 * 1024, description="largest accepted request body")
    accepted_host_headers: list[str] = Field(
        default_factory=list,
        description="Host headers accepted (DNS-rebinding guard); empty = loopback only when bound to loopback",
    )
    instructions_file: Path | None = Field(
        None, description="file whose text replaces the namespace description the model reads (other wordings)"
    )

    def instructions(self, default: str) -> str:
        """The namespace description: the operator's file when one is named, else `default`."""
        if self.instructions_file is None:
            return default
        return self.instructions_file.read_text(encoding="utf-8").strip()
