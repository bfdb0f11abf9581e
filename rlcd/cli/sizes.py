"""Byte sizes as people type them on the command line. Pure.

A flag reads each unit with its real meaning (:func:`rlcd.compaction.policy.parse_size`: ``MB``
is 10^6 bytes, ``MiB`` 2^20, a bare ``128m`` is refused) and must fit a Delta long. Table
properties are another matter: ``delta.targetFileSize`` keeps Spark's reading (every unit
1024-based), see :func:`rlcd.compaction.policy.parse_byte_size`.
"""

from __future__ import annotations

from rlcd.compaction.policy import parse_byte_size, parse_size

__all__ = ("parse_size_flag",)
__pure__ = True


def parse_size_flag(text: str) -> int:
    """Bytes from ``"134217728"``, ``"128MiB"`` or ``"100MB"``.

    Raises:
        ValueError: not such a size, an ambiguous unit (``128m``), zero, or above a Delta long.
    """
    return parse_byte_size(str(parse_size(text)))
