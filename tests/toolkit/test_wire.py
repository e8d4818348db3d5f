"""The services that only pass fleet headers on (the gateway, the orchestrator) import them from `toolkit.wire`,
not from the modules that act on them: neither loads the docker SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from toolkit.wire import refused_cap, size_refusal


def _loads_docker(module: str) -> bool:
    """Whether importing `module` in a fresh interpreter brings the docker SDK in with it."""
    probe = f"import sys, {module}; print('docker' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


@pytest.mark.parametrize("module", ["gateway.app", "orchestrator.app"])
def test_the_gateway_and_the_orchestrator_import_nothing_docker_related(module: str) -> None:
    assert not _loads_docker(module)


def test_the_probe_sees_docker_where_it_is_imported() -> None:
    assert _loads_docker("toolkit.sandbox.runtime")


@pytest.mark.parametrize("prefix", ["", "Error executing tool list_files: "])
def test_a_size_refusal_gives_its_cap_back_and_other_errors_give_none(prefix: str) -> None:
    assert refused_cap(prefix + size_refusal(4096, 1024)) == 1024
    assert refused_cap(prefix + "x-sandbox-memory-mb must be a whole number of MiB, not 'x'") is None
    assert refused_cap(prefix + "the sandbox has at most 1024 MiB") is None
