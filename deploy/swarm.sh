#!/usr/bin/env bash
# The fleet on a swarm (this machine as a single node: `docker swarm init --advertise-addr 127.0.0.1` first).
#   bash deploy/swarm.sh up [STACK]       build the images, deploy compose.yaml + deploy/swarm.yaml as STACK
#   bash deploy/swarm.sh deploy [STACK]   deploy only: the images are already on every node
#   bash deploy/swarm.sh down [STACK]     remove the stack and wait until the manager holds none of its
#                                         containers and networks (workers stop theirs on their own)
# STACK defaults to toolfleet; TOOLFLEET_PORT (default 8080) is the orchestrator's published port.
# Several nodes: DOCKER_HOST names a manager's engine; TOOLFLEET_SWARM_FILES adds overlays (space-separated,
# e.g. deploy/swarm-nodes.yaml); DOCKER_GID is the group of the nodes' engine sockets (default: this host's).
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:?usage: deploy/swarm.sh up|deploy|down [STACK]}
stack=${2:-toolfleet}
case $action in
  up|deploy)
    [ "$(docker info -f '{{.Swarm.LocalNodeState}}')" = active ] || { echo "not a swarm node: docker swarm init --advertise-addr 127.0.0.1" >&2; exit 1; }
    [ "$action" = deploy ] || bash deploy/build-images.sh all
    bash deploy/scripts/fleet_secret.sh   # kept when it exists: every task of every deploy shares it
    DOCKER_GID=${DOCKER_GID:-$(stat -c %g /var/run/docker.sock)}
    export DOCKER_GID
    file=$(mktemp /tmp/toolfleet-stack.XXXXXX.yaml)
    trap 'rm -f "$file"' EXIT
    overlays=(--swarm deploy/swarm.yaml)
    for extra in ${TOOLFLEET_SWARM_FILES:-}; do overlays+=(--swarm "$extra"); done
    .venv/bin/python deploy/scripts/swarm_stack.py "${overlays[@]}" >"$file"
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
  *) echo "usage: deploy/swarm.sh up|deploy|down [STACK]" >&2; exit 2 ;;
esac
