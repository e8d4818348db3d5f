"""Write the swarm stack file for the fleet: compose.yaml, minus what only compose knows, plus deploy/swarm.yaml.

compose.yaml stays the one description of the fleet. `docker stack deploy` rejects some of its keys
(profiles, depends_on conditions) and ignores others (restart, group_add, security_opt, shm_size, tmpfs);
this drops them (tmpfs becomes per-task anonymous volumes) and merges deploy/swarm.yaml over
the rest: mappings merge key by key, anything else (lists, scalars) is replaced. `${VAR}` references are
left for `docker stack deploy` to fill in.

    python3 deploy/scripts/swarm_stack.py [--compose compose.yaml] [--swarm deploy/swarm.yaml] > stack.yaml
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
STACK_VERSION = "3.8"
COMPOSE_ONLY = ("profiles", "depends_on", "restart", "group_add", "security_opt", "shm_size", "tmpfs")


def scratch_mounts(entries: list[str]) -> list[dict[str, Any]]:
    """compose's `tmpfs: ["/path:opts"]` as anonymous volumes of each task. A swarm's tmpfs mounts belong to
    root with mode 0755 and the stack format cannot change that, so a non-root service could not write them;
    an anonymous volume starts as a copy of the image's directory, owner included, and goes with its task."""
    return [{"type": "volume", "target": entry.partition(":")[0]} for entry in entries]


def service(spec: dict[str, Any]) -> dict[str, Any]:
    out = {key: value for key, value in spec.items() if key not in COMPOSE_ONLY}
    if spec.get("tmpfs"):
        out["volumes"] = [*spec.get("volumes", []), *scratch_mounts(spec["tmpfs"])]
    return out


def merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        return {key: merge(base[key], value) if key in base else value for key, value in over.items()} | {
            key: value for key, value in base.items() if key not in over
        }
    return over


def stack(compose: dict[str, Any], swarm: dict[str, Any]) -> dict[str, Any]:
    services = {name: service(spec) for name, spec in compose["services"].items()}
    # The version key: older docker CLIs (Debian's 20.10) load only versioned stack files; newer ones accept it.
    out = (
        {"version": STACK_VERSION}
        | {k: v for k, v in compose.items() if not k.startswith("x-")}
        | {"services": services}
    )
    return merge(out, {key: value for key, value in swarm.items() if not key.startswith("x-")})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compose", type=Path, default=REPO / "compose.yaml")
    parser.add_argument("--swarm", type=Path, default=REPO / "deploy" / "swarm.yaml")
    args = parser.parse_args(argv)
    result = stack(yaml.safe_load(args.compose.read_text()), yaml.safe_load(args.swarm.read_text()))
    yaml.safe_dump(result, sys.stdout, sort_keys=False, width=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
