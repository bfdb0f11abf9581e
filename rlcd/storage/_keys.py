"""Key, prefix and byte-range rules shared by every backend. Pure.

Keys come from Delta logs written by other engines, so they are untrusted: both backends refuse
the same malformed keys (a ``..`` must never escape a local root, and S3 must not quietly accept
a key the local backend cannot store).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlcd.errors import StorageError
from rlcd.storage.base import DELETE_BATCH

__all__ = ("check_key", "check_prefix", "check_range", "check_batch")
__pure__ = True

_BAD_SEGMENTS = frozenset({"", ".", ".."})


def check_key(operation: str, key: str) -> str:
    """Return ``key`` when it is a relative ``/``-separated path of real names.

    Raises:
        StorageError: the key is empty, absolute, has an empty, ``.`` or ``..`` segment, or a NUL.
    """
    if "\0" in key or any(segment in _BAD_SEGMENTS for segment in key.split("/")):
        raise StorageError("invalid key", operation=operation, key=key)
    return key


def check_prefix(operation: str, prefix: str) -> str:
    """Return ``prefix`` when its complete segments (all but the last) obey the key rules.

    The last segment may be partial (``_delta_log/0000``) or empty (``_delta_log/``).
    """
    if "\0" in prefix or any(seg in _BAD_SEGMENTS for seg in prefix.split("/")[:-1]):
        raise StorageError("invalid prefix", operation=operation, key=prefix)
    return prefix


def check_range(
    operation: str, key: str, start: int | None, end: int | None
) -> tuple[int, int | None]:
    """Normalise the half-open range ``[start, end)`` to ``(start, end)`` with ``start >= 0``.

    Raises:
        StorageError: a bound is negative or ``end < start``.
    """
    first = 0 if start is None else start
    if first < 0 or (end is not None and end < first):
        raise StorageError(f"invalid range [{start}, {end})", operation=operation, key=key)
    return first, end


def check_batch(operation: str, keys: Sequence[str]) -> None:
    """Refuse a batch larger than S3's ``DeleteObjects`` takes, on every backend alike.

    Raises:
        StorageError: more than :data:`rlcd.storage.base.DELETE_BATCH` keys.
    """
    if len(keys) > DELETE_BATCH:
        raise StorageError(
            f"{len(keys)} keys in one batch, at most {DELETE_BATCH}",
            operation=operation,
            key=keys[0],
        )
