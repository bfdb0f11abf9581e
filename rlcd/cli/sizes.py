"""Byte sizes as people type them on the command line. Pure.

``MB`` means 10^6 bytes and ``MiB`` 2^20, as everywhere outside Spark: a flag reads each unit
with its real meaning. A bare ``m``/``k``/``g`` could mean either, so it is refused with a hint.
Table properties are another matter: ``delta.targetFileSize`` keeps Spark's reading (every
unit 1024-based), see :func:`rlcd.compaction.policy.parse_byte_size`.
"""

from __future__ import annotations

import re
from typing import Final

from rlcd.compaction.policy import parse_byte_size

__all__ = ("parse_size_flag",)

_SIZE: Final = re.compile(r"([0-9]+)\s*([a-z]*)")
_PREFIXES: Final = ("k", "m", "g", "t", "p")
_UNITS: Final = {
    "": 1,
    "b": 1,
    **{f"{p}b": 1000**i for i, p in enumerate(_PREFIXES, 1)},
    **{f"{p}ib": 1024**i for i, p in enumerate(_PREFIXES, 1)},
}


def parse_size_flag(text: str) -> int:
    """Bytes from ``"134217728"``, ``"128MiB"`` (2^20-based) or ``"100MB"`` (10^6-based),
    units in any case.

    Raises:
        ValueError: not such a size, an ambiguous unit (``128m``), zero, or above a Delta long.
    """
    match = _SIZE.fullmatch(text.strip().lower())
    if match is not None and match[2] in _PREFIXES:
        raise ValueError(
            f"{text!r} is ambiguous: write {match[1]}{match[2].upper()}iB (powers of 1024) or "
            f"{match[1]}{match[2].upper()}B (powers of 1000)"
        )
    if match is None or match[2] not in _UNITS:
        raise ValueError(f"{text!r} is not a byte size (bytes, or with a unit: 128MiB, 100MB)")
    return parse_byte_size(str(int(match[1]) * _UNITS[match[2]]))
