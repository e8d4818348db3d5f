#!/bin/sh
# Start a nested dockerd. The outer engine mounts /sys and the cgroup hierarchies read-only even with every
# capability; the inner engine has to create cgroups, so they are remounted read-write here. Pid files left by
# an earlier run of this container (a node stopped and started again) would stop dockerd and containerd.
# Extra arguments go to dockerd (e.g. -H unix:///node/docker.sock for the host to reach this engine).
set -eu
mount -o remount,rw /sys
for dir in /sys/fs/cgroup /sys/fs/cgroup/*; do
  [ -d "$dir" ] && mount -o remount,rw,bind "$dir" "$dir" 2>/dev/null || true
done
rm -f /run/docker.pid /run/docker/containerd/containerd.pid
exec dockerd --storage-driver=overlay2 -H unix:///var/run/docker.sock "$@"
