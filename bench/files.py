"""`/v1/files` throughput and memory: a large file uploaded and downloaded through a real orchestrator process.

Figures: upload and download MB/s (openai SDK client streaming from / to disk, over loopback), the
orchestrator's peak RSS (VmHWM) before and after, so a body held in memory would show as its size;
baseline from the same run: a plain disk copy of the same file (`shutil.copyfile`), as a ratio.
The worker is the SCRIPTED stand-in (a real process; no model is involved in files).
Not measured yet: the gateway and tool servers (files do not travel to sandboxes in this version).
Usage: python -m bench.files [--mib 100] [--out results.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import print_rows, save  # noqa: E402
from tests.support.service import running_service  # noqa: E402


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) / 1024


def _timed_mbps(mib: int, fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return round(mib / (time.perf_counter() - start), 1), out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.files")
    p.add_argument("--mib", type=int, default=100, help="size of the file in MiB")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="toolfleet-bench-files-") as tmp:
        source, copy, back = Path(tmp, "big.bin"), Path(tmp, "copy.bin"), Path(tmp, "back.bin")
        with source.open("wb") as out:
            for i in range(args.mib):
                out.write(hashlib.sha256(str(i).encode()).digest() * 32768)  # 1 MiB of not-all-zero bytes
        baseline, _ = _timed_mbps(args.mib, lambda: shutil.copyfile(source, copy))
        copy.unlink()
        with running_service(["-m", "orchestrator.worker", "--scripted"]) as worker:
            flags = [
                "-m",
                "orchestrator",
                "--worker-urls",
                json.dumps([worker.url]),
                "--store-path",
                f"{tmp}/store.db",
                "--files-dir",
                f"{tmp}/files",
                "--max-file-bytes",
                str(2 * args.mib << 20),
            ]
            with running_service(flags) as svc:
                client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key="bench", max_retries=0, timeout=600)
                rss_before = peak_rss_mb(svc.proc.pid)
                with source.open("rb") as handle:
                    up, made = _timed_mbps(args.mib, lambda: client.files.create(file=handle, purpose="user_data"))

                def download() -> None:
                    with httpx.stream("GET", f"{svc.url}/v1/files/{made.id}/content", timeout=600) as answer:
                        with back.open("wb") as sink:
                            for chunk in answer.iter_bytes():
                                sink.write(chunk)

                down, _ = _timed_mbps(args.mib, download)
                rss_after = peak_rss_mb(svc.proc.pid)
        same = hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    rows = [
        {"name": "disk copy (baseline)", "mib_s": baseline},
        {"name": f"upload {args.mib} MiB", "mib_s": up, "of_baseline": round(up / baseline, 3)},
        {"name": f"download {args.mib} MiB", "mib_s": down, "of_baseline": round(down / baseline, 3), "same": same},
        {"name": "orchestrator peak RSS", "before_mb": round(rss_before, 1), "after_mb": round(rss_after, 1)},
    ]
    print_rows(rows)
    save(args.out, rows, mib=args.mib)


if __name__ == "__main__":
    main()
