#!/usr/bin/env bash
# Build the images the fleet runs (and, where no registry is reachable, first a local base image tagged
# like the official one, from debootstrap, so the same Dockerfiles build here and on a normal machine).
# Usage: deploy/build-images.sh [sandbox|all|vllm]...
#   sandbox  toolfleet/python-sandbox and toolfleet/container-sandbox (what each session runs in; what the
#            tests' docker backends need; the default)
#   all      sandbox + toolfleet/toolfleet (every service), toolfleet/browser (with a baked-in corpus
#            and index) and toolfleet/redis; and, once, the fleet's secret (deploy/scripts/fleet_secret.sh)
#   vllm     toolfleet/vllm-cpu (a real vLLM CPU worker with the tiny gpt-oss model; ~2.6 GB)
# BASE=image overrides the base (default python:3.11-slim-bookworm). Idempotent: docker's layer cache
# skips unchanged steps.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
base=${BASE:-python:3.11-slim-bookworm}
ca=${SSL_CERT_FILE:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
say() { echo "[build-images] $*"; }
tmp=()
trap 'rm -rf "${tmp[@]}" "$here/.ca.crt"' EXIT

if ! docker image inspect "$base" >/dev/null 2>&1 && ! docker pull -q "$base" >/dev/null 2>&1; then
  say "no registry: building $base locally with debootstrap (~1 min)"
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  mirror=$(grep -hoE '^URIs: *http[^ ]+debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | awk '{print $2}')
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d /tmp/toolfleet-rootfs.XXXXXX); tmp+=("$rootfs")
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" >/dev/null
  tar -C "$rootfs" -c . | docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$base" >/dev/null
  say "$base ready"
fi

# build TAG DOCKERFILE CONTEXT [docker build args...]: quiet, cached, with the base as a build argument.
build() {
  local tag=$1 file=$2 ctx=$3; shift 3
  say "building $tag"
  local t0=$SECONDS
  docker build -q --force-rm --network host --build-arg "BASE=$base" -t "$tag" -f "$file" "$@" "$ctx" \
    2> >(grep -vE 'DEPRECATED: The legacy builder|Install the buildx|docs.docker.com/go/buildx|^ *$' >&2) >/dev/null
  say "$tag ready ($((SECONDS - t0)) s, $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
}

sandbox() {
  local ctx; ctx=$(mktemp -d /tmp/toolfleet-build.XXXXXX); tmp+=("$ctx")
  if [ -f "$ca" ]; then cp "$ca" "$ctx/ca.crt"; else : >"$ctx/ca.crt"; fi
  build toolfleet/python-sandbox:latest "$here/python-sandbox.Dockerfile" "$ctx"
  build toolfleet/container-sandbox:latest "$here/container-sandbox.Dockerfile" "$ctx"
}

services() {
  if [ -f "$ca" ]; then cp "$ca" "$here/.ca.crt"; else : >"$here/.ca.crt"; fi
  build toolfleet/toolfleet:latest "$here/toolfleet.Dockerfile" "$repo" --target runtime
  local ctx; ctx=$(mktemp -d /tmp/toolfleet-build.XXXXXX); tmp+=("$ctx")
  build toolfleet/redis:latest "$here/redis.Dockerfile" "$ctx"
  build toolfleet/browser:latest "$here/toolfleet.Dockerfile" "$repo" --target browser
  build toolfleet/file-search:latest "$here/toolfleet.Dockerfile" "$repo" --target file-search
}

vllm() {
  bash "$here/scripts/setup_vllm_cpu.sh" >/dev/null
  local venv=${TOOLFLEET_VLLM_VENV:-$repo/.cache/vllm-venv} model=${TOOLFLEET_VLLM_MODEL:-$repo/.cache/tiny-gpt-oss}
  # Sending 2.5 GB to the builder takes a minute and a half even when every layer is cached: skip the build
  # when the image was made from the same lock, model and Dockerfile.
  local inputs; inputs=$(cat "$venv/.toolfleet-setup-stamp" "$model/.toolfleet-model-stamp" "$here/vllm-cpu.Dockerfile" 2>/dev/null \
    | cat - <(docker image inspect -f '{{.Id}}' "$base") | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{index .Config.Labels "toolfleet.inputs"}}' toolfleet/vllm-cpu:latest 2>/dev/null)" = "$inputs" ]; then
    say "toolfleet/vllm-cpu:latest is up to date"; return
  fi
  local ctx; ctx=$(mktemp -d /tmp/toolfleet-build.XXXXXX); tmp+=("$ctx")
  # Hard links keep the 2.5 GB context free to assemble when it is on the same file system as the venv.
  cp -al "$venv"/lib/python3*/site-packages "$ctx/site-packages" 2>/dev/null || cp -a "$venv"/lib/python3*/site-packages "$ctx/site-packages"
  cp -a "$model" "$ctx/model"
  build toolfleet/vllm-cpu:latest "$here/vllm-cpu.Dockerfile" "$ctx" --label "toolfleet.inputs=$inputs"
}

for what in "${@:-sandbox}"; do
  case $what in
    sandbox) sandbox ;;
    all) sandbox; services; bash "$here/scripts/fleet_secret.sh" ;;
    vllm) vllm ;;
    *) echo "usage: $0 [sandbox|all|vllm]..." >&2; exit 2 ;;
  esac
done
