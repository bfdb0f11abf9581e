"""Delta interval table properties (``interval 1 week``) as milliseconds. Pure.

Retention properties (``delta.deletedFileRetentionDuration``, ``delta.logRetentionDuration``)
are read by vacuum and by the checkpoint writer (which drops expired tombstones), so the parser
lives in the delta layer both may import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = ("parse_interval",)
__pure__ = True

_UNIT_MS: Final[Mapping[str, float]] = {
    "nanosecond": 1e-6,
    "microsecond": 1e-3,
    "millisecond": 1,
    "second": 1_000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}
_PAIR = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*([a-z]+?)s?\b")


def parse_interval(text: str) -> int:
    """Milliseconds in a Delta interval property (``interval 1 week``, ``interval 2 days
    12 hours``; the ``interval`` word is optional, units singular or plural, any case).

    Months and years are refused, as Delta refuses them for retention: their length varies.

    Raises:
        ValueError: not an interval of fixed-length units, or a negative total.
    """
    body = text.strip().lower()
    body = body.removeprefix("interval").strip()
    pos, total = 0, 0.0
    for match in _PAIR.finditer(body):
        if body[pos : match.start()].strip():
            break
        unit = match.group(2)
        if unit not in _UNIT_MS:
            raise ValueError(f"{text!r}: unit {unit!r} has no fixed length")
        total += float(match.group(1)) * _UNIT_MS[unit]
        pos = match.end()
    if pos == 0 or body[pos:].strip():
        raise ValueError(f"{text!r} is not an interval such as 'interval 1 week'")
    if total < 0:
        raise ValueError(f"{text!r} is negative")
    return int(total)
