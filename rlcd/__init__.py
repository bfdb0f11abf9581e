"""rlcd: keeps Delta Lake tables compact without fighting the other writers."""

__version__ = "0.1.0"
"""The one place the version is written: pyproject.toml reads it from here (a literal, so
that neither the build nor a command's start-up pays for importlib.metadata)."""

__all__ = ("__version__",)
