"""The checkpoint writer makes its add and remove rows from the snapshot's columns: they equal,
row for row, the rows the writer made before from the snapshot's objects (the oracle here:
:attr:`Snapshot.files`, the tombstones as :class:`RemoveFile`), on every readable fixture table
and on generated tables with DVs of each kind, tags, partition values of every type, row
tracking, and tombstones with and without extended metadata, with and without typed stats,
classic and V2.
"""

from __future__ import annotations

import dataclasses
import json
import random
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from rlcd.delta import checkpoint_writer
from rlcd.delta._checkpoint_rows import (
    CheckpointLayout,
    _stats_parsed,
    checkpoint_layout,
    other_rows,
)
from rlcd.delta._columnar import remove_files
from rlcd.delta.actions import Action, AddFile, DomainMetadata, Metadata, Protocol, RemoveFile, Txn
from rlcd.delta.dv import DeletionVectorDescriptor, z85_encode
from rlcd.delta.load import load_snapshot
from rlcd.delta.partitions import parse_partition_value
from rlcd.delta.replay import Snapshot, replay
from rlcd.storage import LocalStore
from tests.conftest import fixture_names
from tests.integration.test_fixture_tables import REFUSED

pytestmark = pytest.mark.integration

STRUCT = {"delta.checkpoint.writeStatsAsStruct": "true"}
STRUCT_ONLY = {**STRUCT, "delta.checkpoint.writeStatsAsJson": "false"}
LAYOUTS = [{}, STRUCT, STRUCT_ONLY]
NOW = 1_767_225_600_000
DAY = 86_400_000
PARTITIONS = {
    "pb": ("byte", ["-128", "127", "0"]),
    "ps": ("short", ["-32768", "7"]),
    "pi": ("integer", ["2147483647", "-1"]),
    "pl": ("long", ["9223372036854775807", "42"]),
    "pf": ("float", ["1.1", "-0.0", "NaN", "Infinity"]),
    "pd": ("double", ["2.5", "-1e300"]),
    "pdec": ("decimal(10,2)", ["12.34", "-0.5"]),
    "pbool": ("boolean", ["true", "false"]),
    "pdate": ("date", ["2024-02-29", "1970-01-01"]),
    "pts": ("timestamp", ["2024-01-01T10:00:00.000000Z", "2021-09-08 11:11:11"]),
    "pntz": ("timestamp_ntz", ["2024-01-01 10:00:00.123", "2000-01-01 00:00:00"]),
    "pstr": ("string", ["a=b/c", "x y", "ü"]),
    "pbin": ("binary", ["bytes"]),
}
DATA = [
    ("i", "integer"),
    ("s", "string"),
    ("f", "double"),
    ("d", "decimal(5,2)"),
    ("ts", "timestamp"),
]


def _schema() -> str:
    fields = [*DATA, *((name, typ) for name, (typ, _) in PARTITIONS.items())]
    return json.dumps(
        {
            "type": "struct",
            "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
        }
    )


def _dv(rng: random.Random, i: int) -> dict[str, Any] | None:
    match i % 6:
        case 0:
            return None
        case 1:  # a u DV at an offset, with a prefix
            encoded = "ab" + z85_encode(uuid.UUID(int=rng.getrandbits(128)).bytes)
            return {
                "storageType": "u",
                "pathOrInlineDv": encoded,
                "offset": 1,
                "sizeInBytes": 34,
                "cardinality": 3,
            }
        case 2:  # no offset; groups led by '%' (the largest words): checked in Python
            encoded = z85_encode(b"\xff" * 16)
            return {
                "storageType": "u",
                "pathOrInlineDv": encoded,
                "sizeInBytes": 20,
                "cardinality": 1,
            }
        case 3:
            return {
                "storageType": "i",
                "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                "sizeInBytes": 40,
                "cardinality": 6,
            }
        case 4:
            return {
                "storageType": "p",
                "pathOrInlineDv": "s3://b/t/dv%20x.bin",
                "offset": 0,
                "sizeInBytes": 10,
                "cardinality": 2,
            }
        case _:
            return None


def _stats(rng: random.Random, i: int) -> str | None:
    match i % 7:
        case 0:
            return None
        case 1:
            return ""
        case 2:
            return "{not json"
        case 3:
            return '{"numRecords":5}'
        case 4:
            return "[1,2]"
        case _:
            low = {
                "i": rng.randint(-5, 5),
                "s": "a",
                "f": "NaN",
                "d": 1.25,
                "ts": "2024-01-01T00:00:00.000-08:00",
            }
            high = {"i": 2**40, "s": "zz", "f": 1e10, "d": 1.234, "ts": "2024-01-01 10:00:00"}
            return json.dumps(
                {
                    "numRecords": rng.randint(0, 10**6),
                    "minValues": low,
                    "maxValues": high,
                    "nullCount": {"i": 0, "s": 3, "f": True},
                    "tightBounds": i % 2 == 0,
                }
            )


def _partition_values(i: int) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for j, (name, (_, choices)) in enumerate(PARTITIONS.items()):
        pick = (i + j) % (len(choices) + 3)
        if pick == len(choices):
            values[name] = None
        elif pick == len(choices) + 1:
            values[name] = ""
        elif pick < len(choices):
            values[name] = choices[pick]
        # else: the key is missing
    return values


def _generated(configuration: dict[str, str], *, files: int = 40, removes: int = 25) -> Snapshot:
    """A snapshot of ``files`` live files and ``removes`` tombstones, of every shape."""
    rng = random.Random(7)
    protocol = Protocol(
        min_reader_version=3,
        min_writer_version=7,
        reader_features=["deletionVectors"],
        writer_features=["deletionVectors", "rowTracking", "domainMetadata"],
    )
    metadata = Metadata(
        id="generated",
        schema_string=_schema(),
        partition_columns=tuple(PARTITIONS),
        configuration=configuration,
    )
    adds = [
        AddFile(
            path=f"part-{i:05d}.parquet",
            partition_values=_partition_values(i),
            size=rng.randint(1, 10**9),
            modification_time=NOW - i,
            data_change=i % 2 == 0,
            stats=_stats(rng, i),
            tags=None
            if i % 3 == 0
            else {"INSERTION_TIME": str(NOW), "k": None if i % 3 == 1 else "v"},
            deletion_vector=None
            if (dv := _dv(rng, i)) is None
            else DeletionVectorDescriptor.from_json(dv),
            base_row_id=i * 100 if i % 4 else None,
            default_row_commit_version=i if i % 4 else None,
            clustering_provider="liquid" if i % 5 == 0 else None,
        )
        for i in range(files)
    ]
    tombstones = [
        RemoveFile(
            path=f"gone-{i:05d}.parquet",
            deletion_timestamp=None if i % 8 == 0 else NOW - (i % 3) * 4 * DAY,
            data_change=True,
            extended_file_metadata=True if i % 2 else None,
            partition_values=_partition_values(i) if i % 2 else None,
            size=rng.randint(1, 10**6) if i % 2 else None,
            deletion_vector=None
            if (dv := _dv(rng, i + 1)) is None
            else DeletionVectorDescriptor.from_json(dv),
            base_row_id=i if i % 5 == 1 else None,
            default_row_commit_version=3 if i % 5 == 1 else None,
        )
        for i in range(removes)
    ]
    others: list[Action] = [
        protocol,
        metadata,
        Txn(app_id="app", version=3, last_updated=NOW),
        DomainMetadata(
            domain="delta.rowTracking", configuration='{"rowIdHighWaterMark":9}', removed=False
        ),
    ]
    return replay("/t", [], checkpoint=(9, [*others, *adds, *tombstones]))


def _configured(snapshot: Snapshot, configuration: dict[str, str]) -> Snapshot:
    metadata = dataclasses.replace(
        snapshot.metadata, configuration={**snapshot.metadata.configuration, **configuration}
    )
    return dataclasses.replace(snapshot, metadata=metadata)


def _object_rows(snapshot: Snapshot, layout: CheckpointLayout, cutoff_ms: int) -> pa.Table:
    """The oracle: the checkpoint's rows as the writer made them from objects before it read
    the columns (main at f90d844): an :class:`AddFile` per live file, a :class:`RemoveFile`
    per tombstone not expired, a dict per row."""
    rows = [{"add": _add_row(a, layout)} for a in snapshot.files.values()]
    for remove in remove_files(snapshot.tombstone_rows):
        if (remove.deletion_timestamp or 0) > cutoff_ms:
            rows.append({"remove": _remove_row(remove)})
    others = other_rows(checkpoint_writer._other_actions(snapshot, v2=layout.v2), layout)
    files = pa.Table.from_pylist(rows, schema=layout.schema)
    return pa.concat_tables([pa.Table.from_batches([others]), files])


def _dv_json(dv: DeletionVectorDescriptor | None) -> dict[str, Any] | None:
    return None if dv is None else dv.to_json()


def _add_row(add: AddFile, layout: CheckpointLayout) -> dict[str, Any]:
    row: dict[str, Any] = {
        "path": add.path,
        "partitionValues": dict(add.partition_values),
        "size": add.size,
        "modificationTime": add.modification_time,
        "dataChange": False,
        "tags": None if add.tags is None else dict(add.tags),
        "deletionVector": _dv_json(add.deletion_vector),
        "baseRowId": add.base_row_id,
        "defaultRowCommitVersion": add.default_row_commit_version,
        "clusteringProvider": add.clustering_provider,
    }
    if layout.stats_as_json:
        row["stats"] = add.stats
    if layout.partitions:
        row["partitionValues_parsed"] = {
            name: parse_partition_value(add.partition_values.get(name), dtype)
            for name, dtype in layout.partitions.items()
        }
    if layout.stats is not None:
        row["stats_parsed"] = _stats_parsed(add.stats, layout.stats)
    return row


def _remove_row(remove: RemoveFile) -> dict[str, Any]:
    return {
        "path": remove.path,
        "deletionTimestamp": remove.deletion_timestamp,
        "dataChange": False,
        "extendedFileMetadata": remove.extended_file_metadata,
        "partitionValues": None
        if remove.partition_values is None
        else dict(remove.partition_values),
        "size": remove.size,
        "deletionVector": _dv_json(remove.deletion_vector),
        "baseRowId": remove.base_row_id,
        "defaultRowCommitVersion": remove.default_row_commit_version,
    }


def _writer_rows(snapshot: Snapshot, layout: CheckpointLayout, cutoff_ms: int) -> pa.Table:
    """The rows the writer puts in a checkpoint with every action inline."""
    files = checkpoint_writer._file_actions(snapshot, cutoff_ms)
    return pa.Table.from_batches(list(checkpoint_writer._top_level(files, layout, (), inline=True)))


def _assert_rows_equal(snapshot: Snapshot, v2: bool, cutoff_ms: int) -> None:
    layout = checkpoint_layout(snapshot.metadata, v2=v2)
    expected = _object_rows(snapshot, layout, cutoff_ms)
    got = _writer_rows(snapshot, layout, cutoff_ms)
    assert got.schema == expected.schema
    assert got.num_rows == expected.num_rows
    for i, (mine, theirs) in enumerate(zip(got.to_pylist(), expected.to_pylist(), strict=True)):
        assert repr(mine) == repr(theirs), f"row {i}"


@pytest.fixture(autouse=True)
def _small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 7 rows: slices at odd offsets, several row groups."""
    monkeypatch.setattr(checkpoint_writer, "BATCH_ACTIONS", 7)


@pytest.mark.parametrize("configuration", LAYOUTS, ids=["json", "struct", "struct-only"])
@pytest.mark.parametrize("v2", [False, True], ids=["classic", "v2"])
def test_generated_rows_equal(configuration: dict[str, str], v2: bool) -> None:
    snapshot = _generated(configuration)
    assert snapshot.adds["deletion_vector"].null_count < snapshot.num_files
    for cutoff in (NOW - 30 * DAY, NOW - 6 * DAY, NOW):
        _assert_rows_equal(snapshot, v2, cutoff)


@pytest.mark.anyio
@pytest.mark.parametrize("name", [n for n in fixture_names() if n not in REFUSED])
async def test_fixture_rows_equal(name: str, copy_fixture: Any) -> None:
    async with LocalStore(copy_fixture(name)) as store:
        snapshot = await load_snapshot(store)
    schemaless = not snapshot.metadata.schema_string  # typed stats need the schema
    for configuration in [{}] if schemaless else LAYOUTS:
        _assert_rows_equal(_configured(snapshot, configuration), False, 0)


def _with_column(table: pa.Table, name: str, column: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, column)


def _nulled(table: pa.Table, name: str, every: int) -> pa.Table:
    """``table`` with ``name`` null on every ``every``-th row (what a checkpoint row without the
    member reads as)."""
    mask = pa.array([i % every == 0 for i in range(table.num_rows)])
    column = table[name].combine_chunks()
    return _with_column(table, name, pc.if_else(mask, pa.nulls(len(column), column.type), column))


@pytest.mark.parametrize("configuration", LAYOUTS, ids=["json", "struct", "struct-only"])
def test_checkpoint_rows_without_members_equal(configuration: dict[str, str]) -> None:
    """Members a checkpoint row may lack (partition values, modification time, data change) are
    written as the object path wrote them."""
    snapshot = _generated(configuration)
    adds = snapshot.adds
    for name, every in (("partition_values", 3), ("modification_time", 4), ("data_change", 2)):
        adds = _nulled(adds, name, every)
    tombstones = _nulled(snapshot.tombstone_rows, "data_change", 3)
    snapshot = dataclasses.replace(snapshot, adds=adds, tombstone_rows=tombstones)
    _assert_rows_equal(snapshot, False, NOW - 6 * DAY)


def _bad_dv(snapshot: Snapshot, row: int, **members: Any) -> Snapshot:
    dvs = snapshot.adds["deletion_vector"].to_pylist()
    dvs[row] = {**(dvs[row] or {}), **members}
    column = pa.array(dvs, snapshot.adds.schema.field("deletion_vector").type)
    return dataclasses.replace(
        snapshot, adds=_with_column(snapshot.adds, "deletion_vector", column)
    )


def _values(snapshot: Snapshot, row: int, name: str, raw: str) -> Snapshot:
    values = snapshot.adds["partition_values"].to_pylist()
    values[row] = [*values[row], (name, raw)]
    column = pa.array(values, snapshot.adds.schema.field("partition_values").type)
    return dataclasses.replace(
        snapshot, adds=_with_column(snapshot.adds, "partition_values", column)
    )


BAD = {
    "storage type": lambda s: _bad_dv(s, 1, storageType="x"),
    "u not z85": lambda s: _bad_dv(s, 1, pathOrInlineDv="ab" + "~" * 20),
    "u too short": lambda s: _bad_dv(s, 1, pathOrInlineDv="abc"),
    "u over 32 bits": lambda s: _bad_dv(s, 2, pathOrInlineDv="#" * 20),
    "p empty": lambda s: _bad_dv(s, 4, pathOrInlineDv=""),
    "negative cardinality": lambda s: _bad_dv(s, 3, cardinality=-1),
    "no size": lambda s: _bad_dv(s, 3, sizeInBytes=None),
    "negative offset": lambda s: _bad_dv(s, 4, offset=-2),
    "partition value": lambda s: _values(s, 5, "pb", "300"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_rows_are_refused_naming_the_file(case: str) -> None:
    """A row the object path refused is refused, and the error names the file."""
    snapshot = BAD[case](_generated(STRUCT))
    layout = checkpoint_layout(snapshot.metadata, v2=False)
    with pytest.raises(ValueError, match=r"deletionVector|partition value"):
        _object_rows(snapshot, layout, 0)
    with pytest.raises(ValueError, match=r"part-0000\d\.parquet"):
        _writer_rows(snapshot, layout, 0)
