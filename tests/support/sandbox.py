"""What a sandbox may reveal of its host: the check both sandbox tools' gVisor runs and the compose test share."""

from __future__ import annotations

HOST_MARKS = ("/var/lib/docker", "/var/lib/containerd", "/run/containerd", "/run/docker", "overlay2")
"""The engine's own directories; runc's bind mounts name them, gVisor's 9p mounts do not."""


def assert_no_host_paths(mountinfo: str) -> None:
    """No mount's root or source names a host path: each is `/` of its own file system (gVisor: 9p, tmpfs, proc...)."""
    assert mountinfo.strip(), "empty mountinfo"
    for line in mountinfo.splitlines():
        if not line.strip() or line.startswith("["):  # the exec tool's `[exit code 0]` line
            continue
        assert not any(mark in line for mark in HOST_MARKS), line
        fields = line.split()
        root, source = fields[3], fields[fields.index("-") + 2]
        assert root == "/", f"a mount of a host subtree: {line}"
        assert not source.startswith("/"), f"a host path as mount source: {line}"
