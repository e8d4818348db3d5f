"""Write the swarm stack file for the fleet: compose.yaml, minus what only compose knows, plus deploy/swarm.yaml.

compose.yaml stays the one description of the fleet. `docker stack deploy` rejects some of its keys
(profiles, depends_on conditions) and ignores others (restart, group_add, security_opt, shm_size, tmpfs);
this drops them (tmpfs becomes per-task anonymous volumes) and merges deploy/swarm.yaml (then each further
--swarm file, e.g. deploy/swarm-nodes.yaml) over the rest: mappings merge key by key, anything else (lists,
scalars) is replaced. Files the repository bind-mounts (`./deploy/gateway.yaml:...`) become swarm configs,
which the manager hands to whichever node runs the task; a bind mount would need the file on every node.
`env_file` entries (the fleet's secret) are made absolute: the stack file is written elsewhere, and
`docker stack deploy` reads them, relative to the stack file, into each service's environment.
`${VAR}` references are left for `docker stack deploy` to fill in.

    python3 deploy/scripts/swarm_stack.py [--compose compose.yaml] [--swarm deploy/swarm.yaml]... > stack.yaml
"""

from __future__ import annotations

import argparse
import hashlib
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


def config_of(entry: Any, base: Path) -> tuple[str, dict[str, Any], dict[str, str]] | None:
    """A `./file:/target[:ro]` bind mount as a swarm config: (key, service entry, top-level definition), else
    None. The key carries a hash of the content: a swarm config cannot change, so an edited file is a new one."""
    if not (isinstance(entry, str) and entry.startswith("./")):
        return None
    source, target = entry.split(":")[:2]
    path = (base / source).resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    key = f"{path.stem}-{digest}"
    return key, {"source": key, "target": target, "mode": 0o444}, {"file": str(path)}


def service(spec: dict[str, Any], base: Path, configs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """One service as a swarm takes it; the configs it now uses are added to `configs`."""
    out = {key: value for key, value in spec.items() if key not in COMPOSE_ONLY}
    volumes, mounted = [], []
    for entry in spec.get("volumes", []):
        if (config := config_of(entry, base)) is None:
            volumes.append(entry)
        else:
            mounted.append(config[1])
            configs[config[0]] = config[2]
    volumes += scratch_mounts(spec.get("tmpfs", []))
    out.pop("volumes", None)
    if "env_file" in spec:
        entries = [spec["env_file"]] if isinstance(spec["env_file"], str) else spec["env_file"]
        out["env_file"] = [str((base / entry).resolve()) for entry in entries]
    return out | ({"volumes": volumes} if volumes else {}) | ({"configs": mounted} if mounted else {})


def merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        return {key: merge(base[key], value) if key in base else value for key, value in over.items()} | {
            key: value for key, value in base.items() if key not in over
        }
    return over


def stack(compose: dict[str, Any], *overlays: dict[str, Any], base: Path = REPO) -> dict[str, Any]:
    """The stack file: compose.yaml (its relative paths against `base`) with each overlay merged over it."""
    configs: dict[str, dict[str, str]] = {}
    services = {name: service(spec, base, configs) for name, spec in compose["services"].items()}
    # The version key: older docker CLIs (Debian's 20.10) load only versioned stack files; newer ones accept it.
    out = (
        {"version": STACK_VERSION}
        | {k: v for k, v in compose.items() if not k.startswith("x-")}
        | {"services": services}
        | ({"configs": configs} if configs else {})
    )
    for overlay in overlays:
        out = merge(out, {key: value for key, value in overlay.items() if not key.startswith("x-")})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compose", type=Path, default=REPO / "compose.yaml")
    parser.add_argument("--swarm", type=Path, action="append", help="overlays, in order (default deploy/swarm.yaml)")
    args = parser.parse_args(argv)
    overlays = [yaml.safe_load(path.read_text()) for path in args.swarm or [REPO / "deploy" / "swarm.yaml"]]
    result = stack(yaml.safe_load(args.compose.read_text()), *overlays, base=args.compose.resolve().parent)
    yaml.safe_dump(result, sys.stdout, sort_keys=False, width=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
