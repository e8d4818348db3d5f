"""Each package's "Where things live" table names every module and sub-package it holds, and nothing that is gone;
the top-level README's table of contents lists its sections.

A table names a module by its path in the package (`api/responses.py`), or by its file name in a row that
names the module's own package (`api/` ... `responses.py`) or, for a top-level module, in any row. Packages are
named with a trailing slash (`kinds/`); `__init__.py` and `__main__.py` need no row. The failure says which
names are missing and which are extra, README by README, so a move is fixed by editing the rows it names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "gateway", "toolkit", "tools/file_search")
TABLE = "## Where things live"
_CODE = re.compile(r"`([^`]+)`")


def _modules(package: Path) -> set[str]:
    """The package's modules and sub-packages, by path in the package (`api/responses.py`, `api/`)."""
    names = set()
    for path in package.rglob("*.py"):
        rel = path.relative_to(package)
        if "__pycache__" not in rel.parts and path.name not in ("__init__.py", "__main__.py"):
            names.add(rel.as_posix())
        names.update(f"{parent.as_posix()}/" for parent in rel.parents if parent != Path("."))
    return names


def _rows(readme: Path) -> list[set[str]]:
    """The code spans of each row of the README's "Where things live" table."""
    text = readme.read_text()
    assert TABLE in text, f"{readme.relative_to(ROOT)} has no {TABLE!r} section"
    section = text.split(TABLE, 1)[1].split("\n## ", 1)[0]
    return [set(_CODE.findall(line)) for line in section.splitlines() if line.startswith("|")]


def _named(module: str, rows: list[set[str]]) -> bool:
    parent, _, name = module.rstrip("/").rpartition("/")
    name += "/" if module.endswith("/") else ""
    for spans in rows:
        if module in spans:
            return True
        if name in spans and (not parent or f"{parent}/" in spans or f"{parent.rpartition('/')[2]}/" in spans):
            return True
    return False


def _exists(span: str, modules: set[str]) -> bool:
    """A path in the package or the repository, or the file name of one of the package's modules."""
    return span in modules or (ROOT / span).exists() or any(_base(m) == _base(span) for m in modules)


def _base(name: str) -> str:
    return name.rstrip("/").rpartition("/")[2]


def _drift(package: str) -> tuple[list[str], list[str]]:
    """(modules the table leaves out, names in it that are no module)."""
    modules = _modules(ROOT / package)
    rows = _rows(ROOT / package / "README.md")
    missing = sorted(m for m in modules if not _named(m, rows))
    spans = {s for row in rows for s in row if re.fullmatch(r"\w[\w/]*(\.py|/)", s)}
    extra = sorted(s for s in spans if not _exists(s, modules))
    return missing, extra


@pytest.mark.parametrize("package", PACKAGES)
def test_the_readme_table_names_every_module_of_its_package_and_nothing_else(package: str) -> None:
    missing, extra = _drift(package)
    assert not missing and not extra, (
        f"{package}/README.md, {TABLE!r}: add rows for {', '.join(missing) or 'nothing'}; "
        f"drop or fix {', '.join(extra) or 'nothing'} (no such module)"
    )


def test_the_check_fails_on_a_module_the_table_leaves_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("named.py", "sub/inner.py", "forgotten.py", "sub/__init__.py"):
        (package / name).write_text('"""A module."""\n')
    rows = ["| module | what |", "|---|---|", "| `named.py`, `gone.py` | x |", "| `sub/` | `inner.py` |"]
    (package / "README.md").write_text("\n".join([TABLE, "", *rows, ""]))
    monkeypatch.setattr(__name__ + ".ROOT", tmp_path)
    assert _drift("pkg") == (["forgotten.py"], ["gone.py"])


def test_the_top_level_readme_has_a_table_of_contents_of_its_sections() -> None:
    text = (ROOT / "README.md").read_text()
    sections = re.findall(r"^## (.+)$", text, re.MULTILINE)
    toc = text.split("\n## ", 1)[0]
    listed = re.findall(r"^- \[(.+?)\]\(#([\w-]+)\)$", toc, re.MULTILINE)
    assert [title for title, _ in listed] == sections
    assert [anchor for _, anchor in listed] == [_anchor(s) for s in sections]


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
