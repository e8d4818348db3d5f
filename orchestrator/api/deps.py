"""What every router is built over: the app's parts, made once by `app.create_app` and handed to each `router`."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.containers import Containers
from orchestrator.files import Files
from orchestrator.metrics import OrchestratorMetrics
from orchestrator.responses.service import ResponsesService
from orchestrator.settings import OrchestratorSettings
from orchestrator.usage import Usage
from orchestrator.worker.client import WorkerPool


@dataclass(frozen=True)
class Deps:
    """One record rather than a parameter list per router, so a router that needs one more part changes no
    other router's signature."""

    settings: OrchestratorSettings
    service: ResponsesService
    pool: WorkerPool | None  # None: tests that pass `generate` alone
    files: Files
    containers: Containers
    metrics: OrchestratorMetrics
    usage: Usage  # counted per key, fleet-wide (the console's Keys page)
