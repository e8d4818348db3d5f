"""The in-sandbox file contract (`toolkit/sandbox/files.py`), run directly on a temporary root: properties
over the paths it accepts or refuses, symlinks in the leaf and in a parent, and bytes that cross chunk
boundaries, end empty, or are read past their end. The tool servers' end-to-end tests run the same module
inside real sandboxes (tests/python_sandbox/test_files.py, tests/container/test_exec.py)."""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.sandbox.file_tools import program
from toolkit.sandbox.files import LIST_LIMIT, MAX_CHUNK, answer

NAMES = st.sampled_from(["a", "b", "data.bin", ".hidden", "x y", "é"])
PARTS = st.one_of(NAMES, st.sampled_from(["..", ".", ""]))
SIZES = st.one_of(
    st.sampled_from([0, 1, MAX_CHUNK - 1, MAX_CHUNK, MAX_CHUNK + 1, 2 * MAX_CHUNK, 3 * MAX_CHUNK + 7]),
    st.integers(0, 3 * MAX_CHUNK),
)


@contextmanager
def sandbox() -> Iterator[tuple[str, Path]]:
    """A root to confine the requests to, beside a directory they must never reach."""
    with tempfile.TemporaryDirectory(prefix="pytest-files-") as top:
        root, outside = Path(top, "root"), Path(top, "outside")
        root.mkdir()
        outside.mkdir()
        (outside / "secret").write_bytes(b"keep")
        yield str(root), outside


def write(root: str, path: str, data: bytes, offset: int = 0) -> dict[str, Any]:
    return answer({"op": "write", "path": path, "data": base64.b64encode(data).decode(), "offset": offset}, root)


def read(root: str, path: str, offset: int = 0, max_bytes: int = MAX_CHUNK) -> dict[str, Any]:
    return answer({"op": "read", "path": path, "offset": offset, "max_bytes": max_bytes}, root)


def untouched(outside: Path) -> bool:
    return sorted(p.name for p in outside.iterdir()) == ["secret"] and (outside / "secret").read_bytes() == b"keep"


@settings(max_examples=100, deadline=None)
@given(parts=st.lists(PARTS, min_size=1, max_size=4), absolute=st.booleans())
def test_a_path_is_accepted_exactly_when_it_names_a_file_under_the_root(parts: list[str], absolute: bool) -> None:
    with sandbox() as (root, outside):
        path = "/".join(parts)
        path = f"{root}/{path}" if absolute else path
        names = [p for p in parts if p not in ("", ".")]
        elsewhere = not absolute and path.startswith("/")  # an absolute path that is not the root's
        expected_ok = ".." not in names and bool(names) and not elsewhere
        wrote = write(root, path, b"hello")
        assert ("error" not in wrote) == expected_ok, (path, wrote)
        if expected_ok:
            assert wrote == {"size": 5}
            assert Path(root, *names).read_bytes() == b"hello"
            assert read(root, path) == {"data": base64.b64encode(b"hello").decode(), "size": 5, "eof": True}
        else:
            assert "path" in wrote["error"] and "error" in read(root, path)
        assert untouched(outside)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["/etc/passwd", "/", "//x", "/tmp/../x"]))
def test_an_absolute_path_outside_the_root_is_refused(name: str) -> None:
    with sandbox() as (root, outside):
        assert "outside" in write(root, name, b"x")["error"]
        assert "error" in read(root, name)
        assert untouched(outside)


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 3), at=st.integers(0, 2), inward=st.booleans(), op=st.sampled_from(["write", "read"]))
def test_a_symlink_in_the_leaf_or_any_parent_is_refused(depth: int, at: int, inward: bool, op: str) -> None:
    """Whether the link leads out of the root or back into it, it is not followed."""
    at = min(at, depth - 1)  # the link's position: depth - 1 is the file itself
    with sandbox() as (root, outside):
        names = [f"d{i}" for i in range(depth - 1)] + ["f"]
        inside = Path(root, "real")
        inside.mkdir()
        (inside / "f").write_bytes(b"keep")
        Path(root, *names[:at]).mkdir(parents=True, exist_ok=True)
        target = inside if inward else outside
        Path(root, *names[: at + 1]).symlink_to(target / "f" if at == depth - 1 else target)
        path = "/".join(names)
        reply = write(root, path, b"x") if op == "write" else read(root, path)
        assert "symlink" in reply["error"], reply
        assert untouched(outside)
        assert [p.name for p in inside.iterdir()] == ["f"] and (inside / "f").read_bytes() == b"keep"


@settings(max_examples=25, deadline=None)
@given(size=SIZES, seed=st.integers(0, 2**32), draw=st.data())
def test_bytes_written_in_chunks_read_back_whole_and_eof_marks_the_last(
    size: int, seed: int, draw: st.DataObject
) -> None:
    chunk = draw.draw(st.integers(max(1, size // 32), MAX_CHUNK), label="read size")  # at most ~32 reads a file
    data = random.Random(seed).randbytes(size)
    with sandbox() as (root, _):
        for offset in range(0, max(size, 1), MAX_CHUNK):  # an empty file: the one write that creates it
            assert write(root, "sub/f.bin", data[offset : offset + MAX_CHUNK], offset) == {
                "size": min(size, offset + MAX_CHUNK)
            }
        back, ends = b"", []
        while not ends or not ends[-1]:
            part = read(root, "sub/f.bin", len(back), chunk)
            assert part["size"] == size
            back += base64.b64decode(part["data"])
            ends.append(part["eof"])
        assert back == data
        assert ends.count(True) == 1 and len(ends) == max(1, -(-size // chunk))
        past = read(root, "sub/f.bin", size + chunk)
        assert past == {"data": "", "size": size, "eof": True}


def test_a_write_at_offset_zero_truncates_and_a_later_offset_extends() -> None:
    with sandbox() as (root, _):
        write(root, "f", b"0123456789")
        assert write(root, "f", b"ab") == {"size": 2}
        assert write(root, "f", b"cd", 2) == {"size": 4}
        assert Path(root, "f").read_bytes() == b"abcd"


def test_the_listing_names_regular_files_only_and_not_under_hidden_directories() -> None:
    with sandbox() as (root, outside):
        for name in ("a.txt", "sub/b.bin", ".dotfile", ".git/config"):
            write(root, name, b"x" * len(name))
        Path(root, "leak").symlink_to(outside / "secret")
        Path(root, "escape").symlink_to(outside)
        os.mkfifo(Path(root, "pipe"))
        listed = answer({"op": "list"}, root)["files"]
        assert [(f["path"], f["size"]) for f in listed] == [(".dotfile", 8), ("a.txt", 5), ("sub/b.bin", 9)]
        assert all(isinstance(f["mtime_ns"], int) for f in listed)
        assert "regular file" in read(root, "pipe")["error"]  # refused at once, not waited on
        assert "'pipe'" in write(root, "pipe", b"x")["error"]  # no reader: refused at once too
        assert "Is a directory" in write(root, "sub", b"x")["error"]
        assert "not a directory" in write(root, "a.txt/x", b"x")["error"]
        assert untouched(outside)


def test_a_listing_stops_at_its_limit_and_a_missing_root_holds_nothing() -> None:
    with sandbox() as (root, _):
        for i in range(LIST_LIMIT + 5):
            Path(root, f"f{i:05}").write_bytes(b"")
        assert len(answer({"op": "list"}, root)["files"]) == LIST_LIMIT
        assert answer({"op": "list"}, f"{root}/missing") == {"files": []}


def test_bad_requests_name_what_is_wrong() -> None:
    with sandbox() as (root, _):
        assert "not valid base64" in answer({"op": "write", "path": "f", "data": "!!"}, root)["error"]
        assert "offset must be" in answer({"op": "write", "path": "f", "data": "", "offset": -1}, root)["error"]
        assert "max_bytes must be" in read(root, "f", max_bytes=MAX_CHUNK + 1)["error"]
        assert "No such file" in read(root, "missing")["error"]
        assert "unknown file op" in answer({"op": "chmod"}, root)["error"]


def test_the_shipped_program_answers_file_requests_without_the_tree(tmp_path: Path) -> None:
    """What a sandbox runs: the kernel's program (`file_tools.program`) on a bare `python3 -I -S` (no
    site-packages, no path of ours), so `toolkit` is importable only as the module the program installs."""
    work = tmp_path / "work"
    work.mkdir()
    cfg = {"timeout_s": 5, "max_output_chars": 100, "max_images": 0, "workdir": str(work)}
    cfg["capture_path"] = str(tmp_path / "capture")
    kernel = Path(__file__).parents[2] / "tools" / "python_sandbox" / "kernel.py"
    requests = [
        {"id": 1, "op": "write", "path": "a/b.txt", "data": base64.b64encode(b"shipped").decode()},
        {"id": 2, "op": "read", "path": "a/b.txt", "max_bytes": 3},
        {"id": 3, "code": "open('a/b.txt').read()"},
        {"id": 4, "op": "read", "path": "/etc/passwd", "max_bytes": 3},
    ]
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    argv = [sys.executable, "-I", "-S", "-u", "-c", program(kernel), json.dumps(cfg)]
    done = subprocess.run(argv, input=lines, capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True)
    ready, *replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert ready == {"ready": True}
    assert replies[0] == {"size": 7, "id": 1}
    assert replies[1] == {"data": base64.b64encode(b"shi").decode(), "size": 7, "eof": False, "id": 2}
    assert replies[2]["result"] == "'shipped'"
    assert replies[3] == {"error": f"path '/etc/passwd' is outside {work}", "id": 4}
