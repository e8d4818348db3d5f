#!/usr/bin/env bash
# Make the fleet's shared secret once: deploy/fleet-secret.env (mode 0600, gitignored), read by compose.yaml's
# `env_file` into every service as TOOLFLEET_FLEET_SECRET. The services sign and check the owner header with it
# (toolkit/wire.py), so a caller who reaches the gateway cannot claim to be another API key. An existing file
# is kept: replicas and restarts must agree. To rotate it, delete the file, run this again and restart the fleet.
set -euo pipefail
file="$(cd "$(dirname "$0")/.." && pwd)/fleet-secret.env"
[ -s "$file" ] && exit 0
umask 077
tmp=$(mktemp "$file.XXXXXX")
printf 'TOOLFLEET_FLEET_SECRET=%s\n' "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" >"$tmp"
mv "$tmp" "$file"
echo "[fleet-secret] made $file"
