"""`python -m toolkit.healthcheck`: the image's HEALTHCHECK, for whichever service the container runs.

One image serves every toolfleet service on a port chosen by flag or environment, so the check does not
guess a port: it reads the container's listening TCP sockets from /proc/net/tcp{,6} and asks each for
`/healthz` (the services) or `/health` (the scripted worker, shaped like vLLM). Healthy when one answers 200.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

LISTEN = "0A"  # the TCP state code of a listening socket in /proc/net/tcp
PATHS = ("/healthz", "/health")


def listening_ports(tables: Iterable[str]) -> list[int]:
    """Ports with a listening socket, from the text of /proc/net/tcp and /proc/net/tcp6."""
    ports: set[int] = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == LISTEN:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def answers(port: int, timeout_s: float = 2.0) -> bool:
    for path in PATHS:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as reply:
                if reply.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            continue
    return False


def main(proc_net: Path = Path("/proc/net")) -> int:
    tables = [p.read_text() for p in (proc_net / "tcp", proc_net / "tcp6") if p.exists()]
    ports = listening_ports(tables)
    if any(answers(port) for port in ports):
        return 0
    sys.stderr.write(f"healthcheck: no healthy service on listening ports {ports}\n")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
