"""How every bench reports: its rows printed one a line, and (with `--out`) saved as JSON with the machine's facts."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any


def environment(**extra: Any) -> dict[str, Any]:
    """What a figure depends on besides the code: the Python, the machine, its cores and their load when the
    figures were saved (1, 5 and 15 minute averages: other work on a shared machine), and the bench's own."""
    facts = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    return facts | {"load_average": [round(x, 2) for x in os.getloadavg()], **extra}


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU seconds so far (`/proc/PID/stat` fields 14 and 15, in clock ticks): on a
    shared machine a process's own CPU time swings much less with the neighbours than wall time does."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def save(path: str | None, rows: list[dict[str, Any]], **extra: Any) -> None:
    if path:
        Path(path).write_text(json.dumps(environment() | extra | {"rows": rows}, indent=2))


def print_rows(rows: list[dict[str, Any]], width: int = 48) -> None:
    """A row a line: its name, then every other figure as `key=value`."""
    for r in rows:
        figures = ", ".join(f"{k}={v}" for k, v in r.items() if k != "name")
        print(f"{r['name']:<{width}} {figures}")


def print_values(rows: list[dict[str, Any]], width: int, value_width: int) -> None:
    """Rows whose headline is one `value`: name, value, then the rest as JSON."""
    for r in rows:
        extra = {k: v for k, v in r.items() if k not in ("name", "value")}
        print(f"{r['name']:<{width}} {r['value']:>{value_width}}  {json.dumps(extra)}")
