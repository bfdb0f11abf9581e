"""``rlcd.__version__``: one literal, which the installed distribution's metadata carries."""

from __future__ import annotations

import importlib.metadata

import rlcd


def test_version_is_the_installed_one() -> None:
    """``rlcd.__version__`` is the version the build read into the installed metadata."""
    assert rlcd.__version__ == importlib.metadata.version("rlcd")
