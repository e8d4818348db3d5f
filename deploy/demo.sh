#!/usr/bin/env bash
# The main job: set up the machine, build the images, start the fleet, answer a demo request that uses
# the browser, python and container tools. The fleet keeps running afterwards:
# `docker-compose -p toolfleet down -v` stops it. TOOLFLEET_PORT (default 8080) is the published port.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash deploy/setup-host.sh all
DOCKER_GID=$(stat -c %g /var/run/docker.sock)
export DOCKER_GID
echo "[demo] starting the fleet (compose.yaml)"
t1=$SECONDS
docker-compose -p toolfleet up -d --remove-orphans 2> >(grep -v '^Creating\|^Starting\|^Recreating' >&2) \
  || { docker-compose -p toolfleet logs --tail 40; exit 1; }
# Every service healthy first (the image's HEALTHCHECK), so the one request meets all three tools up.
for cid in $(docker-compose -p toolfleet ps -q); do
  for _ in $(seq 180); do
    [ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}healthy{{end}}' "$cid")" = healthy ] && break
    sleep 1
  done
done
port=$(docker-compose -p toolfleet port orchestrator 8080 | cut -d: -f2)
.venv/bin/python deploy/demo.py --orchestrator "http://127.0.0.1:$port" \
  || { docker-compose -p toolfleet logs --tail 30; exit 1; }
echo "[demo] done in $((SECONDS - t0)) s (fleet up and answering in $((SECONDS - t1)) s); the fleet is still up:"
echo "[demo]   docker-compose -p toolfleet ps | logs | down -v"
