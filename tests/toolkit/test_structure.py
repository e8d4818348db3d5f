"""The tree's shape, read from the source: no import cycle between product modules, and no function or class
past its size.

Imports. Every `import` and `from ... import` statement counts, wherever it stands: at the top, inside a
function (a lazy import is still a dependency, only a later one) and under `if TYPE_CHECKING:` (it never runs,
but a type named from a layer above is the same circle in the design: the lower module cannot be read, typed
or moved without the upper one). `from pkg import name` is an edge to the module `pkg.name` when there is one,
else to `pkg`; relative imports are resolved against the importing module. Importing `a.b` also runs
`a/__init__.py`, but that implicit edge is left out: a package's `__init__` re-exporting its own modules is
no circle in the design. Modules named by string (`toolkit.registry`'s `"module:Class"` tables) are not
statements and are not read.

Sizes. A function (methods and nested functions included) has at most 50 lines and a class at most 250,
counted from its `def` or `class` line to its last line, decorators left out.
"""

from __future__ import annotations

import ast
import itertools
from collections import deque
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("gateway", "orchestrator", "toolkit", "tools")
SIZED = (*PRODUCT, "bench")
LIMITS: dict[type[ast.AST], int] = {ast.FunctionDef: 50, ast.AsyncFunctionDef: 50, ast.ClassDef: 250}


def _sources(packages: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    """(dotted module name, path) of every module of the packages."""
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The product modules one import statement reaches."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                yield name
        return
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
        base = ".".join([*anchor, *([base] if base else [])])
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            yield f"{base}.{alias.name}"
        elif base in known:
            yield base


def import_graph() -> dict[str, dict[str, int]]:
    """Each product module's imports of product modules, with the line of the first statement naming each."""
    sources = dict(_sources(PRODUCT))
    known = set(sources)
    graph: dict[str, dict[str, int]] = {}
    for module, path in sources.items():
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(node, module, path.name == "__init__.py", known):
                    if target != module:
                        edges.setdefault(target, node.lineno)
    return graph


def components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
            elif successor not in index:
                index[successor] = low[successor] = len(index)
                stack.append(successor)
                on_stack.add(successor)
                work.append((successor, iter(graph[successor])))
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
    return found


def a_cycle(graph: dict[str, dict[str, int]], members: list[str]) -> str:
    """One shortest circle through the component's first module, each step with the line that imports."""
    start, inside = members[0], set(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor in graph[node]:
            if successor == start:
                steps = [node]
                while steps[-1] != start:
                    steps.append(came_from[steps[-1]])
                path = [*reversed(steps), start]
                return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(path)) + f" -> {start}"
            if successor in inside and successor not in came_from:
                came_from[successor] = node
                queue.append(successor)
    raise AssertionError(f"{start} is in a component but on no circle")


def test_no_product_module_is_on_an_import_cycle() -> None:
    graph = import_graph()
    found = components(graph)
    assert not found, "import cycles:\n" + "\n".join(
        f"- {len(members)} modules ({', '.join(members)}), e.g. {a_cycle(graph, members)}" for members in found
    )


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}}
    assert components(graph) == [["a", "b", "c"]]
    assert a_cycle(graph, ["a", "b", "c"]) == "a (line 1) -> b (line 2) -> c (line 3) -> a"


def _oversized() -> Iterator[str]:
    for _, path in _sources(SIZED):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            limit = LIMITS.get(type(node))
            if limit is not None and (lines := (node.end_lineno or node.lineno) - node.lineno + 1) > limit:
                yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines (at most {limit})"


def test_no_function_or_class_is_over_its_size() -> None:
    too_long = list(_oversized())
    assert not too_long, "too long:\n" + "\n".join(too_long)
