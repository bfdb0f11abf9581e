"""The public front: every name ``rlcd.api`` exports imports, and every ``rlcd.`` Python name
the docs mention resolves, so a module move cannot leave the docs pointing nowhere."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import rlcd.api

ROOT = Path(__file__).parents[2]
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
_NAME = re.compile(r"`(rlcd(?:\.\w+)+)")
_FILES = (".service", ".toml")
"""Suffixes that make ``rlcd.<x>`` a file name (the systemd unit, the config), not Python."""


def test_every_exported_name_imports() -> None:
    """``__all__`` lists only names the module has."""
    assert [n for n in rlcd.api.__all__ if not hasattr(rlcd.api, n)] == []


def _resolves(dotted: str) -> bool:
    """Import the longest module prefix of ``dotted``, then getattr the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_documented_names_resolve(doc: Path) -> None:
    """Each backticked ``rlcd.<...>`` name in the docs is a module or an attribute of one."""
    names = sorted({n for n in _NAME.findall(doc.read_text()) if not n.endswith(_FILES)})
    assert [n for n in names if not _resolves(n)] == []
