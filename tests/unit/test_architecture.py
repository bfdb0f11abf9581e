"""The package's shape: layers import only downward, pure modules do no IO, public modules
declare ``__all__``."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import rlcd

PACKAGE = Path(rlcd.__file__).parent
LAYERS = ["storage", "delta", "compaction", "daemon", "cli"]
PURE = [
    "rlcd.delta.actions",
    "rlcd.delta.log_path",
    "rlcd.delta.segment",
    "rlcd.delta.replay",
    "rlcd.delta.checkpoint",
    "rlcd.delta.schema",
    "rlcd.delta.stats_json",
    "rlcd.delta.names",
    "rlcd.delta.partitions",
    "rlcd.delta.predicate",
    "rlcd.delta.protocol",
    "rlcd.delta.dv.codec",
    "rlcd.delta.dv.descriptor",
    "rlcd.delta.dv.z85",
    "rlcd.storage.uri",
    "rlcd.storage.sigv4",
    "rlcd.compaction.policy",
    "rlcd.compaction.plan",
    "rlcd.compaction.counter",
    "rlcd.compaction.encodings",
    "rlcd.compaction.stats",
    "rlcd.compaction.tags",
    "rlcd.compaction.classify",
    "rlcd.compaction.orphans",
    "rlcd.compaction.remap",
    "rlcd.compaction.verify_rules",
    "rlcd.compaction.reconcile",
    "rlcd.delta.outcome",
    "rlcd.daemon.schedule",
]
IO_MODULES = (
    "anyio",
    "aiobotocore",
    "botocore",
    "aiohttp",
    "fsspec",
    "socket",
    "rlcd.storage.s3",
    "rlcd.storage.local",
    "rlcd.delta.load",
)


def _modules() -> list[str]:
    return sorted(
        m.name for m in pkgutil.walk_packages([str(PACKAGE)], prefix="rlcd.") if not m.ispkg
    )


def _imports(module: str) -> set[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else None


@pytest.mark.parametrize("module", _modules())
def test_layers_import_only_downward(module: str) -> None:
    """storage -> delta -> compaction -> daemon -> cli: nothing imports a layer above it."""
    own = _layer(module)
    if own is None:
        return
    for imported in _imports(module):
        other = _layer(imported) if imported.startswith("rlcd.") else None
        assert other is None or other <= own, f"{module} imports {imported} from a higher layer"


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_no_io(module: str) -> None:
    """Protocol logic is sans-IO: no async runtime, no S3 client, no store."""
    for imported in _imports(module):
        assert not imported.startswith(IO_MODULES), f"{module} imports {imported}"


@pytest.mark.parametrize(
    "module",
    [m for m in _modules() if not m.rsplit(".", 1)[1].startswith("_") and m != "rlcd.__main__"],
)
def test_public_modules_declare_all(module: str) -> None:
    """Every public module lists its public names in a tuple ``__all__`` that exists."""
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    assert isinstance(names, tuple), f"{module} has no tuple __all__"
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ names missing attributes {missing}"
