#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (as root) for the fleet and its tests. Idempotent.
#  - Debian packages: docker.io (engine), docker-compose, bubblewrap, debootstrap, redis-server,
#    iproute2 and util-linux (unshare, ip: tests that run services in a private network or mount namespace),
#    python3-doc (the browser's test corpus)
#  - a running Docker engine (started here when none answers; log in /var/log/dockerd.log)
#  - the project virtualenv .venv with the pinned dependencies and test tools
#  - the python sandbox image (deploy/build-images.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[setup] $*"; }

need=()
for pair in dockerd:docker.io docker-compose:docker-compose bwrap:bubblewrap debootstrap:debootstrap \
            redis-server:redis-server pgrep:procps curl:curl npm:npm setpriv:util-linux unshare:util-linux \
            ip:iproute2; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
# the browser tests index a real offline HTML corpus: the Python documentation
[ -d /usr/share/doc/python3-doc/html ] || need+=(python3-doc)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  say "starting dockerd"
  nohup dockerd --storage-driver=overlay2 >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { tail -20 /var/log/dockerd.log; echo "dockerd did not start" >&2; exit 1; }
fi
say "docker engine $(docker info --format '{{.ServerVersion}}')"

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
.venv/bin/pip install -q -e '.[test]'
say "python deps installed"

bash deploy/build-images.sh "${1:-sandbox}"
