"""Session snapshots of the python tool: what saving and restoring a session costs, and what background saves
cost a warm call, with background saves off as the baseline in the same run.

Usage: python -m bench.snapshots [--backend local|docker] [--n-small 20] [--n-large 5] [--calls 1000]
       [--every-s 0.5] [--out results.json]

Rows:
- snapshot and restore p50/p99 of a ~1 MiB and a ~100 MiB state: half a numpy array (stdlib `array.array` where the
  sandbox has no numpy, as the local backend's system python may not; the row says which), half a file in
  /mnt/data. Timed in this process on the backend's real sandboxes, through the keeper and a dir store in a temp
  dir, as the server does it: a snapshot is `keep` (pickled in the sandbox, moved out, sealed, written and
  fsynced), a restore is `bring_back` into a fresh sandbox (read, unsealed, moved in, unpickled; starting the
  sandbox is not timed).
- the warm call (`print(1)`, through bench.wire's lean client) on a session holding the ~1 MiB state, on two
  servers at once: background saves on (`--every-s`, shorter than the server's default so saves fall inside the
  run) and off, one call on each in turn so both see the same machine (a save's CPU slows both alike); the p50
  difference is what background saves cost a call. The on-row says how many background saves ran, and the
  bytes they wrote per call.
- what arming background saves adds to a call's own path: the registry's acquire and release of a real
  kernel's session, in this process, on vs off, in microseconds (a whole call's p50 on a shared machine is far
  noisier than that).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import sessions
from bench.python_sandbox import timed_call
from bench.report import print_rows, save
from bench.wire import wire_session
from toolkit.sessions import SessionRegistry
from toolkit.snapshots import SnapshotId
from toolkit.snapshots.autosave import Autosave
from toolkit.snapshots.directory import DirSnapshots
from toolkit.snapshots.keeper import SnapshotKeeper
from tools.python_sandbox.backends import load_backend
from tools.python_sandbox.core import Backend, Kernel
from tools.python_sandbox.settings import PythonSandboxSettings

STATES = {"~1 MiB": 2**20, "~100 MiB": 100 * 2**20}
OWNER = "bench"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--backend", default="local", choices=["local", "docker"])
    p.add_argument("--n-small", type=int, default=20, help="snapshots and restores of the ~1 MiB state")
    p.add_argument("--n-large", type=int, default=5, help="snapshots and restores of the ~100 MiB state")
    p.add_argument("--calls", type=int, default=1000, help="warm calls measured on each server")
    p.add_argument("--every-s", type=float, default=0.5, help="--snapshot-every-s of the background-on server")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    return p.parse_args(argv)


def state_code(size: int) -> str:
    """Code that gives a session `size` bytes of state, half an array, half a file; its value names the array."""
    half = size // 2
    return (
        "import os\n"
        "try:\n"
        "    import numpy\n"
        f"    data = numpy.frombuffer(os.urandom({half}), dtype=numpy.float64).copy()\n"
        "except ImportError:\n"
        "    import array\n"
        "    data = array.array('d', os.urandom(" + str(half) + "))\n"
        f"open('/mnt/data/blob.bin', 'wb').write(os.urandom({half}))\n"
        "type(data).__module__.split('.')[0]"
    )


async def filled(backend: Backend, size: int) -> tuple[Kernel, str]:
    """A sandbox holding a state of `size`, and the array kind it holds (numpy, or array)."""
    kernel = await backend.new_kernel(f"bench-snap-{uuid.uuid4().hex[:8]}", memory_mb=2048)
    result = await kernel.run(state_code(size), 120)
    assert result.error is None and result.result is not None, result
    return kernel, result.result.strip("'")


async def snapshot_rows(backend: Backend, keeper: SnapshotKeeper, label: str, n: int) -> list[dict[str, Any]]:
    """`n` snapshots of one filled sandbox, then `n` restores of the last into fresh ones."""
    kernel, kind = await filled(backend, STATES[label])
    try:
        taken = [await timed(keeper.keep(label, OWNER, kernel, "bench")) for _ in range(n)]
    finally:
        await kernel.aclose()
    snap = await keeper.store.load(SnapshotId("python", OWNER, label))
    assert snap is not None
    restored = []
    for _ in range(n):
        fresh = await backend.new_kernel(f"bench-restore-{uuid.uuid4().hex[:8]}", memory_mb=2048)
        try:
            restored.append(await timed(keeper.bring_back(label, OWNER, fresh)))
        finally:
            await fresh.aclose()
    extra = {"array": kind, "snapshot_mib": round(len(snap.payload) / 2**20, 2)}
    return [sessions.row(f"snapshot, {label} state", taken, **extra), sessions.row(f"restore, {label}", restored)]


async def timed(work: Any) -> float:
    """Milliseconds `work` (an awaitable that must answer None or a notice, never a failure) took."""
    start = time.perf_counter()
    answer = await work
    assert answer is None or (isinstance(answer, tuple) and answer[1] is None and answer[0]), answer
    return (time.perf_counter() - start) * 1000


async def measure_snapshots(args: argparse.Namespace) -> list[dict[str, Any]]:
    instance = f"bench-{uuid.uuid4().hex[:8]}"
    settings = PythonSandboxSettings(backend=args.backend, disk_mb=512, pool_size=0, instance=instance)
    backend = load_backend(settings)
    await backend.start()
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-snapshots-") as where:
            keeper = SnapshotKeeper(DirSnapshots(where), "python")
            for label, n in (("~1 MiB", args.n_small), ("~100 MiB", args.n_large)):
                rows += await snapshot_rows(backend, keeper, label, n)
            rows.append(await call_path_row(backend, keeper))
    finally:
        await backend.aclose()
    return rows


async def call_path_row(backend: Backend, keeper: SnapshotKeeper, n: int = 20_000) -> dict[str, Any]:
    """What arming background saves adds to a call's own path (the registry's acquire and release of a real
    kernel's session, in this process), without the noise of a whole call on a shared machine."""
    kernel = await backend.new_kernel(f"bench-path-{uuid.uuid4().hex[:8]}")
    per_call: dict[str, float] = {}
    try:
        for name, every_s in [("off", 0.0), ("on", 0.5)] * 3:  # the best of three rounds each
            registry: SessionRegistry[Kernel] = SessionRegistry(lambda key: _ready(kernel), ttl_s=60, max_sessions=2)
            registry.keeper = keeper
            registry.autosave = Autosave(every_s, registry.save_in_background) if every_s else None
            start = time.perf_counter()
            for _ in range(n):
                await registry.acquire("k")
                registry.release("k")
            per_call[name] = min(per_call.get(name, math.inf), (time.perf_counter() - start) / n * 1e6)
    finally:
        await kernel.aclose()
    on, off = per_call["on"], per_call["off"]
    name = "acquire + release, background saves on vs off"
    return {"name": name, "n": n, "on_us": round(on, 2), "off_us": round(off, 2), "added_us": round(on - off, 2)}


async def _ready(kernel: Kernel) -> Kernel:
    return kernel


@asynccontextmanager
async def warm_session(url: str) -> AsyncIterator[Any]:
    """A lean-client session holding the ~1 MiB state, ended with cleanup_session."""
    async with wire_session(url, {"x-session-id": f"bench-warm-{uuid.uuid4().hex[:8]}"}) as session:
        answer = await session.call_tool("python", {"code": state_code(STATES["~1 MiB"])})
        assert not answer.is_error, answer
        yield session
        await session.call_tool("cleanup_session", {})


async def saved(url: str) -> tuple[float, float]:
    """(background saves, bytes they wrote) so far, from the server's /metrics."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{url}/metrics")).text
    found = {"count": 0.0, "bytes": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "toolfleet_tool_snapshots_total" and sample.labels.get("trigger") == "background":
                found["count"] += sample.value
            if sample.name == "toolfleet_tool_snapshot_bytes_sum" and sample.labels.get("op") == "save":
                found["bytes"] += sample.value
    return found["count"], found["bytes"]


async def warm_rows(args: argparse.Namespace, on_url: str, off_url: str) -> list[dict[str, Any]]:
    """Warm calls on both servers in turn, after a warm-up on each."""
    samples: dict[str, list[float]] = {"on": [], "off": []}
    async with warm_session(on_url) as on, warm_session(off_url) as off:
        for session in (on, off):
            for _ in range(20):
                await timed_call(session)
        before = await saved(on_url)
        for _ in range(args.calls):
            for name, session in (("on", on), ("off", off)):
                samples[name].append(await timed_call(session))
        count, written = (a - b for a, b in zip(await saved(on_url), before, strict=True))
    on_row = sessions.row(
        f"warm call, background saves every {args.every_s:g} s",
        samples["on"],
        background_saves=int(count),
        bytes_written_per_call=round(written / len(samples["on"])),
    )
    off_row = sessions.row("warm call, background saves off", samples["off"])
    on_row["p50_over_off_ms"] = round(on_row["p50_ms"] - off_row["p50_ms"], 3)
    return [on_row, off_row]


async def measure_warm(args: argparse.Namespace) -> list[dict[str, Any]]:
    instance = f"bench-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="bench-snapshots-") as where:
        flags = ["--backend", args.backend, "--snapshots", "dir", "--snapshot-dir", where]
        every = ["--snapshot-every-s", str(args.every_s)]
        with (
            sessions.tool_server("tools.python_sandbox", f"{instance}-on", 1, *flags, *every) as on,
            sessions.tool_server(
                "tools.python_sandbox", f"{instance}-off", 1, *flags, "--snapshot-every-s", "0"
            ) as off,
        ):
            return await warm_rows(args, on.url, off.url)


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [*await measure_snapshots(args), *await measure_warm(args)]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    rows = asyncio.run(measure(args))
    load = [round(x, 1) for x in os.getloadavg()]
    print_rows(rows, width=52)
    print(f"load average at the end: {load} (on a shared machine every figure here grows with it)")
    save(args.out, rows, backend=args.backend, every_s=args.every_s, load_average=load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
