"""rlcd uses its dependencies through their public API only, read from the source's AST:

- **Imports**: no private module of :data:`LIBRARIES` (``pyarrow._compute``, ``botocore._x``)
  and no private name from one of their modules is imported.
- **Attributes**: no underscore attribute (dunders aside) is read or written, directly
  (``client._endpoint``) or by name (``getattr(client, "_endpoint")``), unless it is rlcd's
  own: its base is ``self``, ``cls`` or a standard-library module (``os._exit``); or a class of
  rlcd defines the name (a method, a class attribute, an attribute set on ``self``/``cls``),
  objects' types being unknown to the AST; or the base is a module or name imported from rlcd
  and the name is one of rlcd's modules or module-level names. Any other private name can only
  be a dependency's.

A dependency's private part changes without notice in any release; the plants below show the
rule catches each kind.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LIBRARIES = frozenset({"pyarrow", "botocore", "aiobotocore"})
"""The dependencies whose private modules rlcd may not import."""

_BY_NAME = frozenset({"getattr", "hasattr", "setattr", "delattr"})
_OWNERS = frozenset({"self", "cls"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules(package: Path) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(package.rglob("*.py"))}


@dataclass(frozen=True)
class _Own:
    """The names rlcd defines."""

    members: frozenset[str]
    """Defined in a class body or set on ``self``/``cls``: any object's attribute may be one."""
    globals: frozenset[str]
    """Modules and module-level names: an attribute only of what was imported from rlcd."""


def _bound(statement: ast.stmt) -> set[str]:
    """The names a statement binds at its own level (a definition, an assignment)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign):
        targets = [statement.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _own(modules: dict[Path, ast.Module]) -> _Own:
    members: set[str] = set()
    globals_ = {path.stem for path in modules} | {path.parent.name for path in modules}
    for tree in modules.values():
        for statement in tree.body:
            globals_ |= _bound(statement)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for statement in node.body:
                    members |= _bound(statement)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in _OWNERS
            ):
                members.add(node.attr)
    return _Own(frozenset(members), frozenset(globals_))


def _imported_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names a module binds to standard-library modules (``import os``), and to modules
    or names of rlcd (``from rlcd.storage import _keys``, ``from . import x``)."""
    stdlib: set[str] = set()
    rlcd: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in sys.stdlib_module_names:
                    stdlib.add(alias.asname or top)
                elif top == "rlcd":
                    rlcd.add(alias.asname or top)
        elif isinstance(node, ast.ImportFrom) and (
            node.level > 0 or (node.module or "").split(".")[0] == "rlcd"
        ):
            rlcd |= {alias.asname or alias.name for alias in node.names}
    return stdlib, rlcd


def _private_imports(node: ast.AST) -> list[str]:
    """The private modules or names of :data:`LIBRARIES` that ``node`` imports."""
    if isinstance(node, ast.Import):
        dotted = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        dotted = [node.module]
        if not any(map(_private, node.module.split("."))):
            dotted = [f"{node.module}.{alias.name}" for alias in node.names]
    else:
        return []
    return [
        name
        for name in dotted
        if name.split(".")[0] in LIBRARIES and any(map(_private, name.split(".")))
    ]


def _stdlib_modules(tree: ast.Module) -> set[str]:
    """The names a module binds to standard-library modules (``import os``)."""
    return {
        alias.asname or alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.split(".")[0] in sys.stdlib_module_names
    }


def _root(expression: ast.expr) -> str | None:
    """The name an attribute chain starts from (``a`` of ``a.b.c``)."""
    while isinstance(expression, ast.Attribute):
        expression = expression.value
    return expression.id if isinstance(expression, ast.Name) else None


def _private_attribute(node: ast.AST, own: _Own, stdlib: set[str], rlcd: set[str]) -> str | None:
    """The underscore attribute of a dependency's object that ``node`` touches, if any."""
    if isinstance(node, ast.Attribute):
        base, name = node.value, node.attr
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _BY_NAME
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        base, name = node.args[0], node.args[1].value
    else:
        return None
    if not _private(name) or name in own.members:
        return None
    root = _root(base)
    if isinstance(base, ast.Name) and base.id in _OWNERS | stdlib:
        return None
    if name in own.globals and root in rlcd:
        return None
    return name


def violations(package: Path) -> list[str]:
    """Every private access to a dependency in the package at ``package``, as
    ``file:line: what``."""
    modules = _modules(package)
    own = _own(modules)
    found = []
    for path, tree in modules.items():
        where = path.relative_to(package.parent)
        stdlib, rlcd = _imported_names(tree)
        for node in ast.walk(tree):
            for name in _private_imports(node):
                found.append(f"{where}:{node.lineno}: imports private {name}")
            if (attr := _private_attribute(node, own, stdlib, rlcd)) is not None:
                found.append(f"{where}:{getattr(node, 'lineno', 0)}: reads private {attr}")
    return sorted(found)


def test_rlcd_touches_no_private_part_of_its_dependencies() -> None:
    assert violations(ROOT / "rlcd") == []


_BASE = '''
"""Code that must pass: private parts of rlcd's own."""
import os
import pyarrow.compute as pc
from botocore.exceptions import ClientError
from rlcd import _helpers
from rlcd.storage import _keys


class Store:
    _cached = None

    def __init__(self) -> None:
        self._bucket = "b"

    def _key(self) -> str:
        return self._bucket + str(Store._cached) + type(self).__name__

    @classmethod
    def make(cls) -> "Store":
        return cls._build()


def use(store: Store) -> object:
    os._exit(0)
    _helpers._helper(_keys.check_key, pc.add, ClientError)
    return store._key(), getattr(store, "_bucket"), store.make()
'''


@pytest.mark.parametrize(
    ("plant", "expected"),
    [
        ("def f(client):\n    return client._request_signer\n", "reads private _request_signer"),
        # rlcd has a module-level _helper, but api is not an rlcd module
        ("def f(api):\n    return api._helper\n", "reads private _helper"),
        ("def f(api):\n    return api._endpoint.http_session\n", "reads private _endpoint"),
        ("def f(api):\n    return getattr(api, '_endpoint', None)\n", "reads private _endpoint"),
        ("def f(s):\n    hasattr(s, '_proxy_config')\n", "reads private _proxy_config"),
        ("from pyarrow._compute import call_function\n", "imports private pyarrow._compute"),
        ("import botocore._helpers\n", "imports private botocore._helpers"),
        ("from pyarrow import _compute\n", "imports private pyarrow._compute"),
        ("import pyarrow\nx = pyarrow._compute\n", "reads private _compute"),
    ],
)
def test_each_kind_of_private_access_is_caught(tmp_path: Path, plant: str, expected: str) -> None:
    """The base tree passes; one planted private access fails, named with its file and line."""
    package = tmp_path / "rlcd"
    package.mkdir()
    (package / "store.py").write_text(_BASE)
    (package / "_helpers.py").write_text("def _helper(*args: object) -> None:\n    pass\n")
    assert violations(package) == []
    (package / "plant.py").write_text(plant)
    found = violations(package)
    assert len(found) == 1, found
    assert found[0].startswith("rlcd/plant.py:") and found[0].endswith(expected), found
