"""rlcd: keeps Delta Lake tables compact without fighting the other writers."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rlcd")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ("__version__",)
