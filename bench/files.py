"""File throughput and memory: a large file through the orchestrator's `/v1/files`, through the gateway
into a python sandbox's /mnt/data and back (the hidden `write_file` / `read_file` tools, 256 KiB chunks),
and through a whole response: a container holding the file, code_interpreter on it copying it, the copy
pulled back into a container file (`orchestrator/workspace.py`).

Figures: MiB/s each way (the openai SDK streaming from / to disk; an mcp 2.x client over loopback), and
the peak RSS (VmHWM) of the orchestrator, the gateway and the python tool server before and after, so a
body held in memory would show as its size; baseline from the same run: a plain disk copy of the same
file (`shutil.copyfile`), as a ratio. The worker is the SCRIPTED stand-in (no model is involved).
Usage: python -m bench.files [--mib 100] [--backend docker|local] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import print_rows, save  # noqa: E402
from tests.support.mcp2 import mcp_session  # noqa: E402
from tests.support.service import running_service  # noqa: E402
from toolkit.sandbox.files import MAX_CHUNK  # noqa: E402


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def _timed_mbps(mib: int, fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return round(mib / (time.perf_counter() - start), 1), out


async def through_gateway(url: str, source: Path, back: Path, mib: int) -> tuple[float, float]:
    """Push `source` into a sandbox's /mnt/data chunk by chunk, then pull it back into `back`: MiB/s each way."""
    async with mcp_session(url, "streamable-http", {"x-session-id": f"bench-{uuid.uuid4().hex}"}) as session:
        start = time.perf_counter()
        with source.open("rb") as handle:
            offset = 0
            while chunk := handle.read(MAX_CHUNK):
                args = {"path": "big.bin", "data": base64.b64encode(chunk).decode(), "offset": offset}
                assert not (await session.call_tool("write_file", args)).is_error
                offset += len(chunk)
        pushed = time.perf_counter()
        with back.open("wb") as sink:
            offset, eof = 0, False
            while not eof:
                reply = (await session.call_tool("read_file", {"path": "big.bin", "offset": offset})).structured_content
                data = base64.b64decode(reply["data"])
                sink.write(data)
                offset, eof = offset + len(data), reply["eof"]
        pulled = time.perf_counter()
        await session.call_tool("cleanup_session", {})
    return round(mib / (pushed - start), 1), round(mib / (pulled - pushed), 1)


COPY = "import shutil\nshutil.copyfile('/mnt/data/big.bin', '/mnt/data/out.bin')\nprint('copied')"
SCENARIO = {
    "rules": [
        {"match": "python to=assistant", "reply": "<|channel|>final<|message|>See out.bin.<|return|>"},
        {"match": "copy it", "reply": f"<|channel|>analysis to=python<|message|>{COPY}<|call|>"},
    ]
}


def through_a_response(client: openai.OpenAI, url: str, made: str, back: Path) -> tuple[float, str]:
    """A response whose code copies the container's file: seconds for the whole response (the file pushed in,
    the copy pulled out), and the copy's container file downloaded into `back`; its citation's file id."""
    box = client.containers.create(name="bench", file_ids=[made])
    start = time.perf_counter()
    resp = client.responses.create(
        model="bench", input="copy it", tools=[{"type": "code_interpreter", "container": box.id}]
    )
    took = time.perf_counter() - start
    assert resp.output[0].outputs[0].logs.strip() == "copied", resp.output[0]
    (cited,) = resp.output[-1].content[0].annotations
    with httpx.stream("GET", f"{url}/v1/containers/{box.id}/files/{cited.file_id}/content", timeout=600) as answer:
        with back.open("wb") as sink:
            for chunk in answer.iter_bytes():
                sink.write(chunk)
    client.containers.delete(box.id)
    return took, cited.file_id


def _same(a: Path, b: Path) -> bool:
    return hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.files")
    p.add_argument("--mib", type=int, default=100, help="size of the file in MiB")
    p.add_argument("--backend", default="docker", help="the python tool's sandbox backend")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-files-") as tmp:
        source, copy, back = Path(tmp, "big.bin"), Path(tmp, "copy.bin"), Path(tmp, "back.bin")
        with source.open("wb") as out:
            for i in range(args.mib):
                out.write(hashlib.sha256(str(i).encode()).digest() * 32768)  # 1 MiB of not-all-zero bytes
        baseline, _ = _timed_mbps(args.mib, lambda: shutil.copyfile(source, copy))
        copy.unlink()
        run = _Run(args.mib, tmp, source, back, baseline)
        rows = [{"name": "disk copy (baseline)", "mib_s": baseline}, *_files_api(run)]
        with contextlib.ExitStack() as stack:
            sandbox = ["--backend", args.backend, "--instance", f"bench-{uuid.uuid4().hex[:8]}"]
            big = ["--disk-mb", str(3 * args.mib + 64), "--timeout-s", "120"]  # the file, its copy, and room
            python = stack.enter_context(running_service(["-m", "toolkit.cli", "python", *sandbox, *big]))
            routes = Path(tmp, "gateway.yaml")
            routes.write_text(json.dumps({"namespaces": {"python": {"replicas": [f"{python.url}/mcp"]}}}))
            gateway = stack.enter_context(running_service(["-m", "toolkit.cli", "gateway", "--config", str(routes)]))
            procs = {"gateway": gateway.proc.pid, "python tool server": python.proc.pid}
            rows += _through_the_gateway(run, gateway.url, procs)
            rows += _through_a_response(run, stack, gateway.url, procs)
    print_rows(rows)
    save(args.out, rows, mib=args.mib)


@dataclass(frozen=True)
class _Run:
    """One run's file, where it comes back, and the disk copy's speed every row is measured against."""

    mib: int
    tmp: str
    source: Path
    back: Path
    baseline: float

    def of_baseline(self, mib_s: float) -> float:
        return round(mib_s / self.baseline, 3)


def _files_api(run: _Run) -> list[dict]:
    """`/v1/files`: the file uploaded and downloaded through the orchestrator, and its peak RSS around them."""
    with running_service(["-m", "orchestrator.worker", "--scripted"]) as worker:
        flags = ["-m", "orchestrator", "--worker-urls", json.dumps([worker.url]), "--store-path", f"{run.tmp}/store.db"]
        flags += ["--files-dir", f"{run.tmp}/files", "--max-file-bytes", str(2 * run.mib << 20)]
        with running_service(flags) as svc:
            client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="bench", max_retries=0, timeout=600)
            rss_before = peak_rss_mb(svc.proc.pid)
            with run.source.open("rb") as handle:
                up, made = _timed_mbps(run.mib, lambda: client.files.create(file=handle, purpose="user_data"))

            def download() -> None:
                with httpx.stream("GET", f"{svc.url}/v1/files/{made.id}/content", timeout=600) as answer:
                    with run.back.open("wb") as sink:
                        for chunk in answer.iter_bytes():
                            sink.write(chunk)

            down, _ = _timed_mbps(run.mib, download)
            rss_after = peak_rss_mb(svc.proc.pid)
    same = _same(run.source, run.back)
    return [
        {"name": f"upload {run.mib} MiB", "mib_s": up, "of_baseline": run.of_baseline(up)},
        {"name": f"download {run.mib} MiB", "mib_s": down, "of_baseline": run.of_baseline(down), "same": same},
        {"name": "orchestrator peak RSS", "before_mb": round(rss_before, 1), "after_mb": round(rss_after, 1)},
    ]


def _through_the_gateway(run: _Run, gateway_url: str, procs: dict[str, int]) -> list[dict]:
    """The file written into a sandbox and read back through the gateway's MCP, and the processes' peak RSS."""
    before = {name: peak_rss_mb(pid) for name, pid in procs.items()}
    push, pull = asyncio.run(through_gateway(f"{gateway_url}/python", run.source, run.back, run.mib))
    after = {name: peak_rss_mb(pid) for name, pid in procs.items()}
    same_mcp = _same(run.source, run.back)
    run.back.unlink()
    return [
        {"name": f"gateway -> sandbox {run.mib} MiB (write_file)", "mib_s": push, "of_baseline": run.of_baseline(push)},
        {
            "name": f"sandbox -> gateway {run.mib} MiB (read_file)",
            "mib_s": pull,
            "of_baseline": run.of_baseline(pull),
            "same": same_mcp,
        },
        *(
            {"name": f"{name} peak RSS", "before_mb": round(before[name], 1), "after_mb": round(after[name], 1)}
            for name in procs
        ),
    ]


def _through_a_response(run: _Run, stack: contextlib.ExitStack, gateway_url: str, procs: dict[str, int]) -> list[dict]:
    """A response whose code copies an uploaded container file in and out of the sandbox, and the peak RSS."""
    scenario = Path(run.tmp, "scenario.json")
    scenario.write_text(json.dumps(SCENARIO))
    worker = stack.enter_context(
        running_service(["-m", "orchestrator.worker", "--scripted", "--scenario", str(scenario)])
    )
    flags = ["--worker-urls", json.dumps([worker.url]), "--tools-url", gateway_url, "--files-dir", f"{run.tmp}/f2"]
    flags += ["--store-path", f"{run.tmp}/store2.db", "--max-file-bytes", str(2 * run.mib << 20)]
    flags += ["--tool-timeout-s", "600"]
    svc = stack.enter_context(running_service(["-m", "orchestrator", *flags]))
    client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="bench", max_retries=0, timeout=900)
    with run.source.open("rb") as handle:
        upload = client.files.create(file=handle, purpose="user_data")
    pids = {"orchestrator": svc.proc.pid, **procs}
    before = {name: peak_rss_mb(pid) for name, pid in pids.items()}
    took, _ = through_a_response(client, svc.url, upload.id, run.back)
    after = {name: peak_rss_mb(pid) for name, pid in pids.items()}
    return [
        {
            "name": f"a response copying a {run.mib} MiB container file (in and out)",
            "seconds": round(took, 2),
            "mib_s": round(2 * run.mib / took, 1),
            "of_baseline": run.of_baseline(2 * run.mib / took),
            "same": _same(run.source, run.back),
        },
        *(
            {
                "name": f"{name} peak RSS around the response",
                "before_mb": round(before[name], 1),
                "after_mb": round(after[name], 1),
            }
            for name in pids
        ),
    ]


if __name__ == "__main__":
    main()
