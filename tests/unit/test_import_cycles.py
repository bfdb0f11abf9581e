"""No import cycle among rlcd's modules: a cycle makes what a module sees at import time depend
on which module of the cycle was imported first, and hides layering mistakes (issue 38).

Every import that runs counts, also one inside a function: a deferred import only moves the
cycle to run time. An import under ``if TYPE_CHECKING:`` never runs (it is for annotations),
so it makes no edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import rlcd

PACKAGE = Path(rlcd.__file__).parent


def _module_files() -> dict[str, Path]:
    """Every module of rlcd by dotted name (a package by its own name, for its __init__)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names one import statement names: modules, and for ``from X import y``
    both X and X.y (y may be a submodule)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:
        base = module.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    yield target
    yield from (f"{target}.{alias.name}" for alias in node.names)


def _run_time_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree`` outside ``if TYPE_CHECKING:`` bodies."""
    if isinstance(tree, ast.Import | ast.ImportFrom):
        yield tree
        return
    for name, value in ast.iter_fields(tree):
        if name == "body" and isinstance(tree, ast.If) and _is_type_checking(tree.test):
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST):
                yield from _run_time_imports(child)


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Each rlcd module -> the rlcd modules it imports (importing ``a.b.c`` imports ``a.b``
    too: a package's __init__ runs before its submodules)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in _run_time_imports(ast.parse(path.read_text(), str(path))):
            for target in _imported(node, name, path.name == "__init__.py"):
                parts = target.split(".")
                edges.update(
                    prefix
                    for i in range(1, len(parts) + 1)
                    if (prefix := ".".join(parts[:i])) in modules and prefix != name
                )
        # a module's own packages run before it: importing them is no cycle
        graph[name] = {t for t in edges if not name.startswith(f"{t}.")}
    return graph


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the modules along it, the first repeated last; None if none."""
    done: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack = [iter(sorted(graph[root]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_graph_sees_every_kind_of_import() -> None:
    """Absolute, relative, ``from package import module`` and deferred imports are edges."""
    graph = import_graph(_module_files())
    assert "rlcd.cli.daemon" in graph["rlcd.cli.main"]  # from rlcd.cli import daemon
    assert "rlcd.cli.status" in graph["rlcd.cli.daemon"]  # inside a function
    assert "rlcd.cli.exit_codes" in graph["rlcd.cli.status"]
    assert "rlcd.compaction.compact" not in graph["rlcd.cli.report"]  # TYPE_CHECKING only


def test_find_cycle_finds_one() -> None:
    """The search itself: a cycle two steps off the root is found, a diamond is none."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ["b", "c", "b"]
    assert find_cycle({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) is None


def test_rlcd_has_no_import_cycle() -> None:
    """No module of rlcd imports, through any chain, a module that imports it back."""
    cycle = find_cycle(import_graph(_module_files()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())
