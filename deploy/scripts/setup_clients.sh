#!/usr/bin/env bash
# Install the real third-party clients that tests/clients runs against the fleet, pinned, into .cache/.
#
#   deploy/scripts/setup_clients.sh [DIR]      (default .cache/clients)
#
# DIR/venv: openai-agents, langchain-openai, litellm and openai from PyPI (~1 min on a bare machine);
# DIR/npm: @openai/codex from npm, whose native binary ships in the package (~30 s, ~420 MB).
# Idempotent: a stamp (the hash of this script, which holds the pins) skips a finished install.
# Concurrent runs serialise on a flock next to DIR.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${1:-$REPO_ROOT/.cache/clients}"
PYTHON="${PYTHON:-python3}"
PIP_PINS=(openai==3.60.0 openai-agents==0.24.0 langchain-openai==1.8.1 litellm==1.110.2)
NPM_PINS=(@openai/codex@0.171.0)

log() { printf '[setup_clients %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

source "$REPO_ROOT/deploy/scripts/stamp.sh"
if stamp_lock "$DIR" "${BASH_SOURCE[0]}"; then
    log "$DIR is up to date; skipping install"
    exit 0
fi
T0=$SECONDS
log "PyPI: ${PIP_PINS[*]}"
rm -rf "$DIR/venv"
"$PYTHON" -m venv "$DIR/venv"
"$DIR/venv/bin/python" -m pip install -q --disable-pip-version-check "${PIP_PINS[@]}" 2>&1 \
    | { grep -v "^WARNING: Location '.*' is ignored" || true; }
log "npm: ${NPM_PINS[*]}"
rm -rf "$DIR/npm"
mkdir -p "$DIR/npm"
npm install --silent --no-audit --no-fund --prefix "$DIR/npm" "${NPM_PINS[@]}"
[ -x "$DIR/npm/node_modules/.bin/codex" ] || { log "ERROR: codex was not installed" >&2; exit 1; }
stamp_done "$DIR" "${BASH_SOURCE[0]}"
log "done in $((SECONDS - T0)) s"
