"""Checkpoint rows (Arrow) to actions. Pure: the loader reads the Parquet, this interprets it.

A checkpoint has one top-level struct column per action type and one action per row
(delta-protocol.md §1.4). Parquet maps arrive from pyarrow as lists of pairs and absent struct
members as nulls; both are normalised to the JSON shape the commit parser expects, so one parser
serves commits and checkpoints. Adds written with ``writeStatsAsJson=false`` carry only
``stats_parsed``; its content becomes the ``stats`` text so ``numRecords`` is never lost.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from rlcd.delta.actions import Action, ActionError, parse_action
from rlcd.delta.stats_json import stats_json

__all__ = ("checkpoint_actions",)

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


def _to_json_value(value: Any, typ: pa.DataType) -> Any:
    """A pyarrow Python value shaped like the JSON an engine would have written."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return {k: _to_json_value(v, typ.item_type) for k, v in value}
    if pa.types.is_struct(typ):
        out = {}
        for i in range(typ.num_fields):
            f = typ.field(i)
            v = _to_json_value(value.get(f.name), f.type)
            if v is not None:
                out[f.name] = v
        return out
    if pa.types.is_list(typ) or pa.types.is_large_list(typ):
        return [_to_json_value(v, typ.value_type) for v in value]
    return value


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
        typ = column.type
        for i, raw in enumerate(column.to_pylist()):
            if raw is None:
                continue
            value = _to_json_value(raw, typ)
            if name == "add":
                value = _with_parsed_stats(value, raw)
            try:
                actions.append(parse_action({name: value}))
            except ActionError as exc:
                raise ActionError(f"row {i} ({name}): {exc}") from exc
    return actions
