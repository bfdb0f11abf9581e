"""``rlcd.__version__``: the installed distribution's version, read on first use."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator

import pytest

import rlcd


@pytest.fixture
def unread() -> Iterator[None]:
    """The version not read yet in this process, and not left cached by the test."""
    vars(rlcd).pop("__version__", None)
    yield
    vars(rlcd).pop("__version__", None)


@pytest.mark.usefixtures("unread")
def test_version_is_the_installed_one() -> None:
    """``rlcd.__version__`` is the version of the installed distribution."""
    assert rlcd.__version__ == importlib.metadata.version("rlcd")


@pytest.mark.usefixtures("unread")
def test_a_tree_that_is_not_installed_has_an_unknown_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without installed metadata the version is ``0+unknown``, not an import error."""

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert rlcd.__version__ == "0+unknown"


def test_other_missing_names_raise_attribute_error() -> None:
    """Only ``__version__`` is computed; any other missing name is an AttributeError."""
    with pytest.raises(AttributeError, match="no_such_name"):
        rlcd.no_such_name  # noqa: B018
