#!/usr/bin/env bash
# Build the images the fleet runs: the python and container sandbox images (and, where no registry is reachable,
# first a local base image tagged like the official one, from debootstrap).
# Usage: deploy/build-images.sh [sandbox|all]   (default sandbox: both sandbox images, what the tests need; all adds the
#        toolfleet service image the compose file runs). Idempotent: docker's cache skips unchanged steps.
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
trap 'rm -rf "$ctx" ${rootfs:-} "$here/.ca.crt"' EXIT
cp "$here/python-sandbox.Dockerfile" "$ctx/Dockerfile"
if [ -f "$ca" ]; then cp "$ca" "$ctx/ca.crt"; else : >"$ctx/ca.crt"; fi
echo "[build-images] building toolfleet/python-sandbox:latest"
docker build -q --force-rm --network host -t toolfleet/python-sandbox:latest "$ctx" >/dev/null
echo "[build-images] toolfleet/python-sandbox:latest ready"
echo "[build-images] building toolfleet/container-sandbox:latest"
docker build -q --force-rm --network host -t toolfleet/container-sandbox:latest \
  -f "$here/container-sandbox.Dockerfile" "$ctx" >/dev/null
echo "[build-images] toolfleet/container-sandbox:latest ready"

if [ "${1:-sandbox}" = all ]; then
  cp "$ctx/ca.crt" "$here/.ca.crt"
  echo "[build-images] building toolfleet/toolfleet:latest (the services' image)"
  docker build -q --force-rm --network host -t toolfleet/toolfleet:latest -f "$here/toolfleet.Dockerfile" "$here/.." >/dev/null
  echo "[build-images] toolfleet/toolfleet:latest ready"
fi
