"""The checkpoint writer's pure parts: the ``_last_checkpoint`` checksum, the interval rule, and
how stats become typed ``stats_parsed`` bounds (a bound that does not fit is null, never a
rounded value)."""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import pytest

from rlcd.delta._checkpoint_rows import add_rows, checkpoint_layout, other_rows
from rlcd.delta._columnar import file_actions_of
from rlcd.delta._last_checkpoint import json_checksum, last_checkpoint_document
from rlcd.delta.actions import AddFile, CommitInfo, Metadata, Sidecar, parse_action
from rlcd.delta.checkpoint_writer import checkpoint_due, checkpoint_interval
from tests.conftest import fixture_table

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": name, "type": typ, "nullable": True, "metadata": {}}
        for name, typ in [
            ("i", "integer"),
            ("b", "byte"),
            ("f", "double"),
            ("d", "decimal(5,2)"),
            ("day", "date"),
            ("ts", "timestamp"),
            ("ntz", "timestamp_ntz"),
            ("s", "string"),
            ("p", "long"),
        ]
    ],
}
STRUCT = {"delta.checkpoint.writeStatsAsStruct": "true"}


@pytest.mark.parametrize(
    "name",
    ["checkpoint", "dv-with-columnmapping", "v2-checkpoint-json", "basic-dv-with-checkpoint"],
)
def test_checksum_matches_spark(name: str) -> None:
    hint = json.loads((fixture_table(name) / "_delta_log" / "_last_checkpoint").read_text())
    assert json_checksum(hint) == hint["checksum"]


def test_last_checkpoint_document() -> None:
    text = last_checkpoint_document(version=20, size=7, size_in_bytes=1234, num_of_add_files=3)
    document = json.loads(text)
    assert list(document)[:2] == ["version", "size"]
    assert "parts" not in document
    assert document["checksum"] == json_checksum(document)


def test_interval() -> None:
    assert checkpoint_interval({}) == 10
    assert checkpoint_interval({"delta.checkpointInterval": " 3 "}) == 3
    for bad in ("0", "-1", "ten", "2.5"):
        with pytest.raises(ValueError, match="checkpointInterval"):
            checkpoint_interval({"delta.checkpointInterval": bad})
    assert [v for v in range(25) if checkpoint_due(v, {})] == [10, 20]


def _row(stats: dict[str, Any], *, configuration: dict[str, str] | None = None) -> Any:
    metadata = Metadata(
        id="t",
        schema_string=json.dumps(SCHEMA),
        partition_columns=("p",),
        configuration=configuration if configuration is not None else STRUCT,
    )
    layout = checkpoint_layout(metadata, v2=False)
    add = AddFile(path="p=7/a.parquet", partition_values={"p": "7"}, stats=json.dumps(stats))
    return add_rows(file_actions_of([add]).adds, layout).to_pylist()[0]["add"]


def test_bounds_are_typed() -> None:
    bounds = {
        "i": 5,
        "b": -3,
        "f": "NaN",
        "d": 1.5,
        "day": "2024-02-29",
        "ts": "2024-01-01T00:00:00.000-08:00",
        "ntz": "2024-01-01 10:00:00.123",
        "s": "x",
    }
    stats = {"numRecords": 4, "minValues": bounds, "nullCount": {"i": 1}, "tightBounds": False}
    add = _row(stats)
    assert add["partitionValues_parsed"] == {"p": 7}
    parsed = add["stats_parsed"]
    assert parsed["numRecords"] == 4 and parsed["tightBounds"] is False
    low = parsed["minValues"]
    assert math.isnan(low.pop("f"))
    assert low == {
        "i": 5,
        "b": -3,
        "d": Decimal("1.50"),
        "day": dt.date(2024, 2, 29),
        "ts": dt.datetime(2024, 1, 1, 8, tzinfo=dt.UTC),
        "ntz": dt.datetime(2024, 1, 1, 10, 0, 0, 123000),
        "s": "x",
    }
    assert parsed["maxValues"] is None
    assert parsed["nullCount"]["i"] == 1 and parsed["nullCount"]["s"] is None
    assert add["stats"] == json.dumps(stats)


def test_bounds_that_do_not_fit_are_null() -> None:
    """Out of range, too precise, the wrong time form or type: unknown, not rounded."""
    bounds = {
        "b": 300,
        "d": 1.234,
        "ts": "2024-01-01 10:00:00",
        "ntz": "2024-01-01T10:00:00Z",
        "i": True,
        "day": "29.02.2024",
    }
    low = _row({"numRecords": 1, "minValues": bounds})["stats_parsed"]["minValues"]
    assert all(v is None for v in low.values()), low


def test_properties_choose_the_columns() -> None:
    plain = _row({"numRecords": 1}, configuration={})
    assert plain["stats"] and "stats_parsed" not in plain
    assert "partitionValues_parsed" not in plain
    only = _row(
        {"numRecords": 1}, configuration={**STRUCT, "delta.checkpoint.writeStatsAsJson": "false"}
    )
    assert "stats" not in only and only["stats_parsed"]["numRecords"] == 1


@pytest.mark.parametrize("action", [CommitInfo(operation="WRITE"), AddFile(path="a", size=1)])
def test_other_rows_refuse_commit_and_file_actions(action: Any) -> None:
    layout = checkpoint_layout(Metadata(id="t", schema_string=json.dumps(SCHEMA)), v2=False)
    with pytest.raises(ValueError, match=type(action).__name__):
        other_rows([action], layout)


def test_sidecar_layout_and_rows() -> None:
    """A V2 checkpoint with sidecars has Spark's ``sidecar`` column; a sidecar file holds the
    ``add`` and ``remove`` columns alone; a sidecar row reads back as the action written."""
    metadata = Metadata(id="t", schema_string=json.dumps(SCHEMA))
    assert "sidecar" not in checkpoint_layout(metadata, v2=True).schema.names
    layout = checkpoint_layout(metadata, v2=True, sidecars=True)
    assert layout.schema.names[-2:] == ["checkpointMetadata", "sidecar"]
    assert layout.sidecar_schema.names == ["add", "remove"]
    sidecar = Sidecar("a%20b.parquet", 123, 1_700_000_000_000)
    (row,) = other_rows([sidecar], layout).to_pylist()
    assert row["sidecar"] == {
        "path": "a%20b.parquet",
        "sizeInBytes": 123,
        "modificationTime": 1_700_000_000_000,
        "tags": None,
    }
    assert parse_action({"sidecar": sidecar.to_json()}) == sidecar
