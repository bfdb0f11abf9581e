"""The package's shape, read from its source: which package may import which, pure modules do
no IO, private modules stay in their package, packages import each other in no cycle, and
public modules declare ``__all__``.

:func:`violations` checks a tree of parsed modules and returns what breaks the rules; the tests
that plant one violation of each kind in a small tree of their own run the very same function.

What counts as an import: every ``import`` and ``from ... import`` anywhere in a module
(inside functions and under ``if TYPE_CHECKING:`` too), resolved to the module it names.
``import a.b`` names ``a.b``; ``from a import b`` names ``a.b`` where that is a module of the
tree, else ``a`` (``b`` is a name in it); a relative import is resolved against the importing
module's package. Outside the tree ``from a import b`` is taken as ``a.b``: the rules match
dotted prefixes, so the verdict is the same whether ``b`` is a module or a name. The packages
above the module named (whose ``__init__`` Python runs first) are not counted.

- **Layers**: a package (``rlcd.X``; a module directly under ``rlcd`` is a package of its own)
  imports only itself and the packages :data:`MAY_IMPORT` lists for it; the list is acyclic,
  storage → parquet → delta → reconcile → compaction → operations → daemon → cli (parquet
  imports no other rlcd package). TYPE_CHECKING imports count: a type named from a higher
  layer is a dependency on it all the same.
- **Package cycles**: the packages the code imports (TYPE_CHECKING included) form no cycle,
  whatever :data:`MAY_IMPORT` says. Cycles between modules are ``test_import_cycles.py``'s.
- **Purity**: a module claims it by a module-level ``__pure__ = True``, and its docstring says
  so ("Pure", "pure:", "sans-IO"), the one exactly when the other. A pure module imports none
  of :data:`IMPURE` (IO, the clock, randomness, logging) and, of rlcd, only pure modules. What
  runs counts: imports under TYPE_CHECKING are left out (a pure module may name an IO
  module's types in annotations). ``os`` is not in the list:
  ``storage.uri`` makes paths absolute with ``os.path``.
- **Private modules**: a module whose name, or one of whose packages' names, starts with ``_``
  is imported only from within the package that holds it: ``rlcd.storage._keys`` only by
  ``rlcd.storage``'s modules, ``rlcd._tasks`` (held by ``rlcd`` itself) by any rlcd module.
- **Public means used**: in a package that other packages may import, a module that none of
  them imports is an implementation detail and takes a leading ``_``; what stays public is the
  package's face. The top (``rlcd.cli``, ``rlcd.api``), which no package but ``__main__`` may
  import, is exempt.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import rlcd

_SHARED = frozenset({"rlcd", "rlcd.errors", "rlcd._tasks"})
"""The version, the exception tree and the task helpers: every package may import them."""

_ENGINE = frozenset({"rlcd.storage", "rlcd.delta", "rlcd.parquet", "rlcd.reconcile"})
"""The layers under the compaction engine: the engine and everything above it may import them."""

MAY_IMPORT: dict[str, frozenset[str]] = {
    "rlcd": frozenset(),
    "rlcd.errors": frozenset(),
    "rlcd._tasks": frozenset(),
    "rlcd.storage": _SHARED,
    "rlcd.parquet": _SHARED,
    "rlcd.delta": _SHARED | {"rlcd.storage", "rlcd.parquet"},
    "rlcd.reconcile": _SHARED | {"rlcd.delta"},
    "rlcd.compaction": _SHARED | _ENGINE,
    "rlcd.operations": _SHARED | _ENGINE | {"rlcd.compaction"},
    "rlcd.daemon": _SHARED | _ENGINE | {"rlcd.compaction", "rlcd.operations"},
    "rlcd.cli": _SHARED | _ENGINE | {"rlcd.compaction", "rlcd.operations", "rlcd.daemon"},
    "rlcd.api": _SHARED | _ENGINE | {"rlcd.compaction", "rlcd.operations"},
    "rlcd.__main__": frozenset({"rlcd.cli"}),
}
"""Each package of rlcd -> the other packages it may import."""

IMPURE = (
    *("anyio", "asyncio", "aiobotocore", "aiohttp", "botocore", "boto3", "fsspec"),
    *("socket", "ssl", "http.client", "urllib.request", "subprocess", "shutil", "tempfile"),
    *("pyarrow.fs", "threading", "concurrent", "logging", "structlog", "time", "random"),
    "secrets",
)
"""What a pure module may not import: IO, threads, the clock, randomness, logging."""

_TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")
_CLAIM = re.compile(r"\b[Pp]ure\b(?=[.:)]| functions)|\bsans-IO\b")


@dataclass(frozen=True, slots=True)
class Module:
    """One module of the tree: its dotted name, whether it is a package's ``__init__``, and
    its parsed source."""

    name: str
    is_package: bool
    tree: ast.Module

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @property
    def pure(self) -> bool:
        """Whether the module claims purity with ``__pure__ = True``."""
        return any(
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["__pure__"]
            and isinstance(node.value, ast.Constant)
            and node.value.value is True
            for node in self.tree.body
        )


@dataclass(frozen=True, slots=True)
class Import:
    """One module named by an import statement of ``importer``."""

    importer: str
    target: str
    line: int
    typing_only: bool


def read_tree(root: Path, package: str) -> dict[str, Module]:
    """Every module of ``package``, a directory under ``root``, by dotted name."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, is_package, ast.parse(path.read_text(), str(path)))
    return modules


def _statements(
    node: ast.AST, typing_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement at or under ``node``, and whether only type checkers run it."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, typing_only
    elif isinstance(node, ast.If) and ast.unparse(node.test) in _TYPE_CHECKING:
        for stmt in node.body:
            yield from _statements(stmt, True)
        for stmt in node.orelse:
            yield from _statements(stmt, typing_only)
    else:
        for child in ast.iter_child_nodes(node):
            yield from _statements(child, typing_only)


def imports(module: Module, names: Mapping[str, Module]) -> Iterator[Import]:
    """The modules ``module`` imports, resolved (see the module docstring).

    Raises:
        ValueError: a relative import climbs above the tree's top package.
    """
    for node, typing_only in _statements(module.tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = module.package.split(".")
                if node.level > len(package):
                    raise ValueError(f"{module.name}:{node.lineno}: relative import beyond top")
                base = ".".join([*package[: len(package) - node.level + 1], *filter(None, [base])])
            targets = [
                f"{base}.{alias.name}"
                if f"{base}.{alias.name}" in names or base not in names
                else base
                for alias in node.names
            ]
        for target in targets:
            yield Import(module.name, target, node.lineno, typing_only)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _private_to(name: str) -> str | None:
    """The package a private module is private to: the one holding its innermost private
    name (which lies within any other's). None for a public module."""
    parts = name.split(".")
    private = [i for i, p in enumerate(parts) if p.startswith("_") and not p.endswith("__")]
    return ".".join(parts[: private[-1]]) if private else None


def _unit(name: str) -> str:
    """The package a module belongs to for layering: ``rlcd.X`` for any module under it."""
    return ".".join(name.split(".")[:2])


def cycles(graph: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """The groups of nodes that reach each other along ``graph``'s edges (each sorted)."""

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in graph.get(todo.pop(), frozenset()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {node: reach(node) for node in graph}
    groups = {
        tuple(sorted(n for n in reached if n in reached[node] and node in reached[n]))
        for node in graph
    }
    return sorted(list(group) for group in groups if group)


def violations(
    modules: Mapping[str, Module],
    may_import: Mapping[str, frozenset[str]],
    impure: tuple[str, ...] = IMPURE,
) -> list[str]:
    """Everything in ``modules`` that breaks a rule of the module docstring, one line each."""
    found: list[str] = []
    edges: dict[str, set[str]] = {}
    used_outside: set[str] = set()
    tops = {name.split(".")[0] for name in modules}
    for module in modules.values():
        unit = _unit(module.name)
        if unit not in may_import:
            found.append(f"{module.name}: its package {unit} is not in the layering table")
        claims = bool(_CLAIM.search(ast.get_docstring(module.tree) or ""))
        if claims != module.pure:
            found.append(f"{module.name}: its docstring and its __pure__ disagree")
        for imp in imports(module, modules):
            where = f"{module.name}:{imp.line} imports {imp.target}"
            if module.pure and not imp.typing_only:
                if any(_within(imp.target, io) for io in impure):
                    found.append(f"{where}: IO in a pure module")
                elif imp.target in modules and not modules[imp.target].pure:
                    found.append(f"{where}: a module that is not pure, in a pure module")
            if imp.target.split(".")[0] not in tops:
                continue
            owner = _private_to(imp.target)
            if owner is not None and not _within(module.name, owner):
                found.append(f"{where}: private to {owner}")
            target_unit = _unit(imp.target)
            if target_unit != unit:
                used_outside.add(imp.target)
                edges.setdefault(unit, set()).add(target_unit)
                if unit in may_import and target_unit not in may_import[unit]:
                    found.append(f"{where}: {unit} may not import {target_unit}")
    importable = set().union(*(v for k, v in may_import.items() if not k.endswith(".__main__")))
    for name, module in modules.items():
        if (
            _unit(name) in importable
            and name != _unit(name)
            and not module.is_package
            and _private_to(name) is None
            and name not in used_outside
        ):
            found.append(f"{name}: no other package imports it, so its name starts with _")
    for group in cycles({u: frozenset(targets) for u, targets in edges.items()}):
        found.append(f"packages import each other in a cycle: {' '.join(group)}")
    return list(dict.fromkeys(found))


PACKAGE = Path(rlcd.__file__).parent
MODULES = read_tree(PACKAGE.parent, "rlcd")


def test_the_package_keeps_its_shape() -> None:
    """rlcd's own tree breaks no rule: layers, package cycles, purity, private modules."""
    assert violations(MODULES, MAY_IMPORT) == []


def test_the_layering_table_is_acyclic() -> None:
    """The allowed directions between packages form no cycle, and name only real packages."""
    assert cycles(MAY_IMPORT) == []
    assert {_unit(name) for name in MODULES} == set(MAY_IMPORT)


def test_the_modules_that_say_they_are_pure_are_checked() -> None:
    """The modules whose docstrings said they were pure before the claim became a marker are
    among those checked (thrift, splice and batching were once missed)."""
    pure = {name for name, module in MODULES.items() if module.pure}
    for name in ("parquet._thrift", "parquet._splice", "parquet.batching", "compaction.plan"):
        assert f"rlcd.{name}" in pure
    for name in ("classify", "bin_actions"):
        assert f"rlcd.reconcile.{name}" in pure
    assert {"rlcd.delta.actions", "rlcd.storage.uri", "rlcd.daemon.schedule"} <= pure


_PLANT_RULES = {
    "fake": frozenset(),
    "fake.low": frozenset(),
    "fake.high": frozenset({"fake.low"}),
}
_PLANT_BASE = {
    "__init__.py": "",
    "low/__init__.py": "",
    "low/_hidden.py": "",
    "low/io.py": "import socket\n",
    "low/calc.py": '"""Pure."""\n__pure__ = True\n',
    "high/__init__.py": "",
    "high/app.py": "from fake.low import calc\nfrom ..low import io\n",
}


@pytest.mark.parametrize(
    ("path", "source", "reported"),
    [
        ("low/up.py", "from fake.high import app\n", "fake.low may not import fake.high"),
        ("low/up.py", "def f() -> None:\n    from ..high import app\n", "may not import"),
        (
            "low/up.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fake.high.app\n",
            "fake.low may not import fake.high",
        ),
        ("low/up.py", "from fake import high\n", "fake.low may not import fake.high"),
        ("low/up.py", "from fake.high.app import f\n", "packages import each other in a cycle"),
        ("high/peek.py", "from fake.low import _hidden\n", "private to fake.low"),
        ("high/peek.py", "from ..low._hidden import x\n", "private to fake.low"),
        ("low/calc.py", '"""Pure."""\n__pure__ = True\nimport anyio\n', "IO in a pure module"),
        (
            "low/calc.py",
            '"""Pure."""\n__pure__ = True\ndef f() -> None:\n    from urllib import request\n',
            "IO in a pure module",
        ),
        ("low/calc.py", '"""Pure."""\n__pure__ = True\nfrom . import io\n', "not pure"),
        ("low/calc.py", '"""Pure: no IO."""\n', "docstring and its __pure__ disagree"),
        ("side/__init__.py", "", "fake.side is not in the layering table"),
        ("low/helper.py", "", "fake.low.helper: no other package imports it"),
    ],
)
def test_a_planted_violation_is_reported(
    tmp_path: Path, path: str, source: str, reported: str
) -> None:
    """The checker reports each kind of violation planted in an otherwise clean tree."""
    for name, text in {**_PLANT_BASE, path: source}.items():
        (tmp_path / "fake" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / name).write_text(text)
    found = violations(read_tree(tmp_path, "fake"), _PLANT_RULES)
    assert any(reported in line for line in found), found


def test_a_clean_planted_tree_passes(tmp_path: Path) -> None:
    """The plants' base tree (a pure module, a type-only import of IO, a private module used
    in its own package, relative imports) breaks no rule."""
    base = {
        **_PLANT_BASE,
        "low/_typed.py": (
            '"""Pure."""\n__pure__ = True\nfrom typing import TYPE_CHECKING\n'
            "if TYPE_CHECKING:\n    from fake.low import io\n"
        ),
        "low/_user.py": "from . import _hidden\nfrom fake.low._hidden import x\n",
    }
    for name, text in base.items():
        (tmp_path / "fake" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / name).write_text(text)
    assert violations(read_tree(tmp_path, "fake"), _PLANT_RULES) == []


def test_imports_resolve_every_form(tmp_path: Path) -> None:
    """Absolute, ``from`` (module or name), relative and nested imports name the module."""
    for name, text in {"__init__.py": "", "a/__init__.py": "", "a/m.py": "", "a/n.py": ""}.items():
        (tmp_path / "p" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "p" / name).write_text(text)
    (tmp_path / "p" / "a" / "n.py").write_text(
        "import p.a.m\nfrom p.a import m, thing\nfrom . import m as mm\nfrom .m import x\n"
        "from .. import a\nfrom os import path\n"
        "def f() -> None:\n    import json\n"
    )
    modules = read_tree(tmp_path, "p")
    found = [i.target for i in imports(modules["p.a.n"], modules)]
    assert found == ["p.a.m", "p.a.m", "p.a", "p.a.m", "p.a.m", "p.a", "os.path", "json"]


@pytest.mark.parametrize(
    "module",
    [
        name
        for name, module in MODULES.items()
        if not module.is_package
        and not name.rsplit(".", 1)[1].startswith("_")
        and name != "rlcd.__main__"
    ],
)
def test_public_modules_declare_all(module: str) -> None:
    """Every public module lists its public names in a tuple ``__all__`` that exists."""
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    assert isinstance(names, tuple), f"{module} has no tuple __all__"
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ names missing attributes {missing}"
