"""The package metadata builds without setuptools deprecation warnings."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_license_is_an_spdx_expression_with_a_backend_that_reads_it() -> None:
    """`project.license` is a plain SPDX string (the table form makes setuptools print pages
    of deprecation warnings on every install), which needs setuptools 77 or later."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in meta["build-system"]["requires"]
    classifiers = meta["project"].get("classifiers", [])
    assert not [c for c in classifiers if c.startswith("License ::")]
