"""`toolfleet worker --scripted --scenario FILE [--api chat]`: a scripted vLLM-compatible worker (port 8000):
`/v1/completions` with Harmony token ids, or `/v1/chat/completions` as a chat-template model's worker."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Literal

import structlog
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from orchestrator.worker.scripted import (
    ChatScenario,
    Scenario,
    ScriptedChatModel,
    ScriptedModel,
    build_app,
    build_chat_app,
)
from toolkit.logging import configure_logging
from toolkit.serve import serve
from toolkit.settings import ServiceSettings


class WorkerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_WORKER_", cli_kebab_case=True, extra="ignore")

    port: int = Field(8000, description="port to bind")
    scripted: bool = Field(False, description="serve scripted replies (the only mode this command has)")
    scenario: str | None = Field(None, description="scenario file (YAML/JSON); default: one canned answer")
    token_delay_s: float | None = Field(None, description="pause before each streamed token")
    api: Literal["harmony", "chat"] = Field(
        "harmony",
        description="harmony: /v1/completions (token ids) and /v1/chat/completions (Harmony parsed, as vLLM "
        "serves gpt-oss); chat: /v1/chat/completions (a chat-template model's parsed deltas)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = ["--scripted=true" if a == "--scripted" else a for a in (sys.argv[1:] if argv is None else argv)]
    settings = WorkerSettings.from_args(args, "toolfleet worker")
    if not settings.scripted:
        sys.stderr.write("toolfleet worker: only --scripted is provided; run vLLM itself for a real worker\n")
        return 2
    configure_logging(settings.log_level, service="worker-scripted")
    app, model, rules = _app(settings)
    structlog.get_logger(__name__).info(
        "worker.scripted",
        model=model,
        api=settings.api,
        rules=rules,
        port=settings.port,
        note="SCRIPTED worker: replies come from a scenario file, not a model",
    )
    serve(app, settings)
    return 0


def _app(settings: WorkerSettings) -> tuple[object, str, int]:
    """(app, model name, rule count) for the chosen wire format."""
    kind = ChatScenario if settings.api == "chat" else Scenario
    scenario = kind.load(settings.scenario) if settings.scenario else kind()
    if settings.token_delay_s is not None:
        scenario.token_delay_s = settings.token_delay_s
    if isinstance(scenario, ChatScenario):
        return build_chat_app(ScriptedChatModel(scenario)), scenario.model, len(scenario.rules)
    return build_app(ScriptedModel(scenario)), scenario.model, len(scenario.rules)


if __name__ == "__main__":
    raise SystemExit(main())
