"""rlcd: keeps Delta Lake tables compact without fighting the other writers."""

from __future__ import annotations

__all__ = ("__version__",)


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed metadata on first use: importing
    :mod:`importlib.metadata` costs a one-shot command ~40 ms of start-up it may never need."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("rlcd")
    except PackageNotFoundError:  # running from a source tree that is not installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
