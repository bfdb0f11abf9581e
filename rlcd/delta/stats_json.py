"""Delta file statistics as JSON text. Pure.

``json`` refuses :class:`~decimal.Decimal` and a float would round it: a decimal bound written
as a float can land inside the column's range, and a reader's data skipping then drops rows.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

__all__ = ("stats_json",)
__pure__ = True


def stats_json(value: Any, *, engine_floats: bool = False) -> str:
    """Compact JSON of a stats tree: decimals as exact numbers, dates and timestamps in ISO
    8601, bytes as text.

    Raises:
        ValueError: a float is NaN or infinite, unless ``engine_floats`` (float stats bounds,
            rlcd's or another engine's): then they are the strings Spark's JSON writer puts
            there (``"NaN"``, ``"Infinity"``, ``"-Infinity"``), which Delta readers parse.
    """
    if isinstance(value, dict):
        members = (
            f"{stats_json(k)}:{stats_json(v, engine_floats=engine_floats)}"
            for k, v in value.items()
        )
        return "{" + ",".join(members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(stats_json(v, engine_floats=engine_floats) for v in value) + "]"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime | dt.date):
        return json.dumps(value.isoformat())
    if isinstance(value, bytes):
        return json.dumps(value.decode("utf-8", "replace"), ensure_ascii=False)
    if engine_floats and isinstance(value, float) and not math.isfinite(value):
        return '"NaN"' if math.isnan(value) else '"Infinity"' if value > 0 else '"-Infinity"'
    return json.dumps(value, ensure_ascii=False, allow_nan=False)
