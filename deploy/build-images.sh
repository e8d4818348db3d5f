#!/usr/bin/env bash
# Build the images the fleet runs: the python sandbox image (and, where no registry is reachable,
# first a local base image tagged like the official one, from debootstrap).
# Usage: deploy/build-images.sh            (idempotent; rebuilds only what is missing or changed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
base=python:3.11-slim-bookworm
ca=${SSL_CERT_FILE:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}

if ! docker image inspect "$base" >/dev/null 2>&1 && ! docker pull -q "$base" >/dev/null 2>&1; then
  echo "[build-images] no registry: building $base locally with debootstrap (~1 min)"
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  mirror=$(grep -hoE '^URIs: *http[^ ]+debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | awk '{print $2}')
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d /tmp/toolfleet-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" >/dev/null
  tar -C "$rootfs" -c . | docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' - "$base" >/dev/null
  echo "[build-images] $base ready"
fi

ctx=$(mktemp -d /tmp/toolfleet-build.XXXXXX)
trap 'rm -rf "$ctx" ${rootfs:-}' EXIT
cp "$here/python-sandbox.Dockerfile" "$ctx/Dockerfile"
if [ -f "$ca" ]; then cp "$ca" "$ctx/ca.crt"; else : >"$ctx/ca.crt"; fi
echo "[build-images] building toolfleet/python-sandbox:latest"
docker build -q --force-rm --network host -t toolfleet/python-sandbox:latest "$ctx" >/dev/null
echo "[build-images] toolfleet/python-sandbox:latest ready"
