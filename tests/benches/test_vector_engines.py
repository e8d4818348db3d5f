"""Smoke test of `bench.vector_engines` at a tiny size: each candidate whose library is installed goes through
build, the effort sweep, reopen and delete, beside the exact baseline of the same run; one that is not
installed is a skipped row, never a failure hidden in the figures."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

from bench.vector_candidates import CANDIDATES
from bench.vector_engines import BASELINE, main

SIZE = 120
EFS = (10, 64)


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("vector-engines")
    out = tmp / "rows.json"
    flags = ["--base", "24", "--sizes", str(SIZE), "--queries", "6", "--timed", "5", "--target", "0.5"]
    assert main([*flags, "--ef", ",".join(map(str, EFS)), "--cache", str(tmp / "cache"), "--out", str(out)]) == 0
    return {r["name"]: r for r in json.loads(out.read_text())["rows"]}


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(module.partition(".")[0]) is not None for module in modules)


def test_exact_baseline_finds_the_truth_and_keeps_it_across_reopen_and_delete(rows: dict[str, dict[str, Any]]) -> None:
    exact = rows[f"{SIZE}: {BASELINE}"]
    assert exact["recall@10"] == 1.0
    assert exact["reopen_same"] is True
    assert exact["deleted_found"] == 0
    assert exact["recall_after_delete"] == 1.0
    assert rows["vectors"] == {"name": "vectors", "base_real": 24, "queries_real": 6, "dims": 384}


@pytest.mark.parametrize("name", [n for n in CANDIDATES if n != BASELINE])
def test_each_candidate_is_measured_or_said_missing(name: str, rows: dict[str, dict[str, Any]]) -> None:
    candidate = CANDIDATES[name]
    title = f"{SIZE}: {name}" + (" M=16" if candidate.graph else "")
    row = rows[title]
    if not installed(candidate.module, *candidate.needs):
        assert row["skipped"].startswith("not installed")
        return
    assert "failed" not in row and "skipped" not in row, row
    assert row["reopen_same"] is True
    assert row.get("deleted_found") == 0 or row["delete"].startswith("no: ")
    if candidate.graph:
        sweep = [rows[f"{title} ef={ef}"] for ef in EFS]
        assert all(0.0 <= r["recall@10"] <= 1.0 and r["p50_ms"] > 0 and "p50_vs_exact_x" in r for r in sweep)
        assert any("at_target" in r for r in sweep)
    else:
        assert row["recall@10"] == 1.0


def test_too_small_a_base_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--base", "5"])
    assert stop.value.code == 2
    assert "--base must be over 10" in capsys.readouterr().err


def test_an_unknown_engine_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--engines", "hnswlib,annoy"])
    assert stop.value.code == 2
    assert "unknown --engines ['annoy']" in capsys.readouterr().err
