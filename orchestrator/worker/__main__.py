"""`toolfleet worker --scripted --scenario FILE`: the scripted vLLM-compatible worker (port 8000)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import structlog
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from toolkit.logging import configure_logging
from toolkit.serve import serve
from toolkit.settings import ServiceSettings


class WorkerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_WORKER_", cli_kebab_case=True, extra="ignore")

    port: int = Field(8000, description="port to bind")
    scripted: bool = Field(False, description="serve scripted replies (the only mode this command has)")
    scenario: str | None = Field(None, description="scenario file (YAML/JSON); default: one canned answer")
    token_delay_s: float | None = Field(None, description="pause before each streamed token")


def main(argv: Sequence[str] | None = None) -> int:
    args = ["--scripted=true" if a == "--scripted" else a for a in (sys.argv[1:] if argv is None else argv)]
    settings = WorkerSettings.from_args(args, "toolfleet worker")
    if not settings.scripted:
        sys.stderr.write("toolfleet worker: only --scripted is provided; run vLLM itself for a real worker\n")
        return 2
    from orchestrator.worker.scripted import Scenario, ScriptedModel, build_app

    configure_logging(settings.log_level, service="worker-scripted")
    scenario = Scenario.load(settings.scenario) if settings.scenario else Scenario()
    if settings.token_delay_s is not None:
        scenario.token_delay_s = settings.token_delay_s
    structlog.get_logger(__name__).info(
        "worker.scripted", model=scenario.model, rules=len(scenario.rules), port=settings.port,
        note="SCRIPTED worker: replies come from a scenario file, not a model",
    )  # fmt: skip
    serve(build_app(ScriptedModel(scenario)), settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
