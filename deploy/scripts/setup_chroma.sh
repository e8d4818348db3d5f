#!/usr/bin/env bash
# Install Chroma's server (the `chromadb` package from PyPI, pinned) into a venv of its own under .cache/, for the
# file_search tool's `chroma` vector engine: its tests and bench start `chroma run` from there.
#
#   deploy/scripts/setup_chroma.sh [DIR]      (default .cache/chroma; prints the `chroma` executable's path last)
#
# Its own venv because chromadb brings a large tree of its own (onnxruntime, grpc, kubernetes, opentelemetry)
# that the fleet's venv does not want; the tool talks to the server over HTTP only. Idempotent: a stamp (the
# hash of this script, which holds the pin) skips a finished install; concurrent runs serialise on a flock.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${1:-$REPO_ROOT/.cache/chroma}"
PYTHON="${PYTHON:-python3}"
PIN=chromadb==1.5.9

log() { printf '[setup_chroma %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

source "$REPO_ROOT/deploy/scripts/stamp.sh"
if stamp_lock "$DIR" "${BASH_SOURCE[0]}"; then
    log "$DIR is up to date; skipping install"
else
    T0=$SECONDS
    log "PyPI: $PIN"
    rm -rf "$DIR/venv"
    "$PYTHON" -m venv "$DIR/venv"
    "$DIR/venv/bin/python" -m pip install -q --disable-pip-version-check "$PIN" 2>&1 \
        | { grep -v "^WARNING: Location '.*' is ignored" || true; } >&2
    [ -x "$DIR/venv/bin/chroma" ] || { log "ERROR: chroma was not installed"; exit 1; }
    stamp_done "$DIR" "${BASH_SOURCE[0]}"
    log "done in $((SECONDS - T0)) s"
fi
echo "$DIR/venv/bin/chroma"
