#!/usr/bin/env bash
# The fleet on a swarm (this machine as a single node: `docker swarm init --advertise-addr 127.0.0.1` first).
#   bash deploy/swarm.sh up [STACK]     build the images, deploy compose.yaml + deploy/swarm.yaml as STACK
#   bash deploy/swarm.sh down [STACK]   remove the stack and wait until its tasks and networks are gone
# STACK defaults to toolfleet; TOOLFLEET_PORT (default 8080) is the orchestrator's published port.
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:?usage: deploy/swarm.sh up|down [STACK]}
stack=${2:-toolfleet}
case $action in
  up)
    [ "$(docker info -f '{{.Swarm.LocalNodeState}}')" = active ] || { echo "not a swarm node: docker swarm init --advertise-addr 127.0.0.1" >&2; exit 1; }
    bash deploy/build-images.sh all
    DOCKER_GID=$(stat -c %g /var/run/docker.sock)
    export DOCKER_GID
    file=$(mktemp /tmp/toolfleet-stack.XXXXXX.yaml)
    trap 'rm -f "$file"' EXIT
    .venv/bin/python deploy/scripts/swarm_stack.py >"$file"
    # Relative bind mounts (the gateway's routes, the worker's scenario) resolve against the stack file's
    # directory: deploy from the repository root with absolute paths.
    sed -i "s#source: \./#source: $PWD/#; s#- \./#- $PWD/#" "$file"
    docker stack deploy --resolve-image never --prune -c "$file" "$stack"
    ;;
  down)
    docker stack rm "$stack"
    for _ in $(seq 90); do
      [ -z "$(docker ps -aq --filter "label=com.docker.stack.namespace=$stack")" ] \
        && [ -z "$(docker network ls -q --filter "label=com.docker.stack.namespace=$stack")" ] && exit 0
      sleep 1
    done
    echo "stack $stack still has containers or networks after 90 s" >&2; exit 1
    ;;
  *) echo "usage: deploy/swarm.sh up|down [STACK]" >&2; exit 2 ;;
esac
