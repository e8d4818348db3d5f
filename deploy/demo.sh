#!/usr/bin/env bash
# The main job: set up the machine, build the images, start the fleet, answer a demo request.
# The fleet keeps running afterwards: `docker-compose -p toolfleet down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup-host.sh all
DOCKER_GID=$(stat -c %g /var/run/docker.sock)
export DOCKER_GID
echo "[demo] starting the fleet (compose.yaml)"
docker-compose -p toolfleet up -d --remove-orphans || { docker-compose -p toolfleet logs --tail 40; exit 1; }
.venv/bin/python deploy/demo.py
echo "[demo] done; the fleet is still up (docker-compose -p toolfleet down to stop it)"
