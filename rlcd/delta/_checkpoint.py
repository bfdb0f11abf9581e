"""Checkpoint rows (Arrow) to actions. Pure: the loader reads the Parquet, this interprets it.

A checkpoint has one top-level struct column per action type and one action per row
(delta-protocol.md §1.4). Parquet maps arrive from pyarrow as lists of pairs and absent struct
members as nulls; both are normalised to the JSON shape the commit parser expects, so one parser
serves commits and checkpoints. Adds written with ``writeStatsAsJson=false`` carry only
``stats_parsed``; its content becomes the ``stats`` text so ``numRecords`` is never lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from rlcd.delta.actions import Action, ActionError, parse_action
from rlcd.delta.stats_json import stats_json

__all__ = ("checkpoint_actions",)
__pure__ = True

_ACTION_COLUMNS = (
    "protocol",
    "metaData",
    "txn",
    "domainMetadata",
    "checkpointMetadata",
    "sidecar",
    "add",
    "remove",
)


def _json_shape(typ: pa.DataType) -> Callable[[Any], Any] | None:
    """A function that shapes a pyarrow Python value of ``typ`` like the JSON an engine would
    have written (structs without their null fields), or None where the value is that already.
    Built once per column, not asked of the type at every value: asking it took a large share
    of a checkpoint's parsing."""
    if pa.types.is_map(typ):
        item = _json_shape(typ.item_type)
        if item is None:
            return lambda value: None if value is None else dict(value)
        return lambda value: None if value is None else {k: item(v) for k, v in value}
    if pa.types.is_struct(typ):
        fields = [(f.name, _json_shape(f.type)) for f in typ]

        def struct(value: Any) -> Any:
            if value is None:
                return None
            out = {}
            for name, shape in fields:
                v = value.get(name)
                if shape is not None and v is not None:
                    v = shape(v)
                if v is not None:
                    out[name] = v
            return out

        return struct
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        element = _json_shape(typ.value_type)
        if element is None:
            return None
        return lambda value: None if value is None else [element(v) for v in value]
    return None


def _with_parsed_stats(add: dict[str, Any], raw: dict[str, Any] | None) -> dict[str, Any]:
    if add.get("stats") is None and raw and raw.get("stats_parsed"):
        add["stats"] = stats_json(raw["stats_parsed"], engine_floats=True)
    add.pop("stats_parsed", None)
    add.pop("partitionValues_parsed", None)
    return add


def checkpoint_actions(table: pa.Table) -> list[Action]:
    """Every action in a checkpoint (or sidecar) file, in row order.

    Raises:
        ActionError: a row holds a malformed action (the loader names the file).
    """
    actions: list[Action] = []
    for name in _ACTION_COLUMNS:
        if name not in table.column_names:
            continue
        column = table.column(name)
        shape = _json_shape(column.type)
        for i, raw in enumerate(column.to_pylist()):
            if raw is None:
                continue
            value = raw if shape is None else shape(raw)
            if name == "add":
                value = _with_parsed_stats(value, raw)
            try:
                actions.append(parse_action({name: value}))
            except ActionError as exc:
                raise ActionError(f"row {i} ({name}): {exc}") from exc
    return actions
