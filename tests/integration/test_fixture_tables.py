"""Every fixture table loads, and rlcd's view of it matches delta-rs and the Delta kernel.

For DV tables the live rows rlcd computes (the Parquet rows minus the DV positions) must equal,
as a multiset, what ``deltalake`` ``DeltaTable.scan()`` returns, and the DV positions must equal
``DeltaTable.deletion_vectors()``.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.delta.load import load_snapshot, read_deletion_vector
from rlcd.delta.partitions import decode_uri_path
from rlcd.delta.replay import Snapshot
from rlcd.delta.schema import column_mapping_mode, parse_schema, physical_name
from rlcd.errors import UnsupportedFeatureError
from rlcd.storage import LocalStore
from tests.conftest import fixture_names, fixture_table
from tests.integration.tables import checkpoint_and_json_snapshots

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

REFUSED = {"deltalog-invalid-protocol-version"}
# Spark test tables whose JSON metaData lacks schemaString: delta-rs refuses them, rlcd loads
# them (and refuses only work that needs the schema).
DELTA_RS_UNREADABLE = {"canonicalized-paths-special-a", "corrupted-last-checkpoint"}
DV_TABLES = [
    "basic-dv-no-checkpoint",
    "basic-dv-with-checkpoint",
    "dv-with-columnmapping",
    "krs-table-with-dv-small",
    "krs-with-short-dv",
]


def _relative(uri: str, root: Path) -> str:
    """A delta-rs file URI or path made relative to the table root and percent-decoded."""
    for prefix in (root.as_uri() + "/", str(root) + "/"):
        if uri.startswith(prefix):
            return decode_uri_path(uri[len(prefix) :])
    return decode_uri_path(uri)


async def _load(path: Path, version: int | None = None) -> Snapshot:
    async with LocalStore(path) as store:
        return await load_snapshot(store, version=version)


@pytest.mark.parametrize(
    "name", [n for n in fixture_names() if n not in REFUSED | DELTA_RS_UNREADABLE]
)
async def test_fixture_loads_like_delta_rs(name: str) -> None:
    """The live file set equals the one delta-rs computes."""
    path = fixture_table(name)
    snap = await _load(path)
    dt = deltalake.DeltaTable(str(path))
    assert snap.version == dt.version()
    # delta-rs also undoes the Hive escaping of partition directories: compare file names, and
    # check that every path rlcd holds names a file that exists.
    theirs = sorted(Path(u).name for u in dt.file_uris())
    assert sorted(Path(decode_uri_path(p)).name for p in snap.files) == theirs
    if any(p.suffix == ".parquet" for p in path.iterdir()) or any(
        p.is_dir() and "=" in p.name for p in path.iterdir()
    ):
        assert all((path / decode_uri_path(p)).is_file() for p in snap.files)
    assert snap.metadata.id == dt.metadata().id


async def test_tables_delta_rs_cannot_read_still_load() -> None:
    """Tables without schemaString load; a remove spelled file:/x removes the add spelled /x."""
    for name in sorted(DELTA_RS_UNREADABLE):
        with pytest.raises(Exception, match="schemaString"):
            deltalake.DeltaTable(str(fixture_table(name))).file_uris()
    canonical = await _load(fixture_table("canonicalized-paths-special-a"))
    assert canonical.version == 1 and canonical.files == {}
    checkpointed = await _load(fixture_table("checkpoint"))
    assert checkpointed.version == 14 and len(checkpointed.files) == 1
    lying_hint = await _load(fixture_table("corrupted-last-checkpoint"))
    assert lying_hint.version == 10 and len(lying_hint.files) == 11


async def test_invalid_protocol_version_is_refused() -> None:
    """A reader version no one supports is refused, naming the version and the table."""
    path = fixture_table("deltalog-invalid-protocol-version")
    with pytest.raises(UnsupportedFeatureError, match="reader version 99") as info:
        await _load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "name",
    [
        "basic-dv-with-checkpoint",
        "checkpoint",
        "dv-with-columnmapping",
        "corrupted-last-checkpoint",
    ],
)
async def test_checkpoint_equals_json_replay(name: str) -> None:
    """Starting from the checkpoint gives the same snapshot as replaying every JSON commit."""
    from_checkpoint, from_json = await checkpoint_and_json_snapshots(fixture_table(name))
    assert from_checkpoint.version == from_json.version

    def essence(snap: Snapshot) -> dict[str, tuple[Any, ...]]:
        # checkpoints rewrite dataChange to false; everything else must survive
        return {
            p: (a.dv_unique_id, a.size, dict(a.partition_values), a.stats, a.tags)
            for p, a in snap.files.items()
        }

    assert essence(from_checkpoint) == essence(from_json)
    assert from_checkpoint.protocol == from_json.protocol
    assert from_checkpoint.metadata == from_json.metadata


def _deleted_positions_delta_rs(path: Path) -> dict[str, set[int]]:
    table = pa.table(deltalake.DeltaTable(str(path)).deletion_vectors().read_all())
    out = {}
    for row in table.to_pylist():
        rel = _relative(row["filepath"], path)
        out[rel] = {i for i, keep in enumerate(row["selection_vector"]) if not keep}
    return out


def _rows(table: pa.Table) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(
        zip(*(table.column(c).to_pylist() for c in sorted(table.column_names)), strict=True)
    )


@pytest.mark.parametrize("name", DV_TABLES)
async def test_dv_tables_live_rows_match_delta_rs(name: str) -> None:
    """Parquet rows minus rlcd's decoded DV equal delta-rs scan(); positions equal delta-rs's."""
    path = fixture_table(name)
    snap = await _load(path)
    schema = parse_schema(snap.metadata.schema_string)
    mode = column_mapping_mode(snap.metadata.configuration)
    logical = {physical_name(f, mode): f.name for f in schema.fields}
    data_columns = [f.name for f in schema.fields if f.name not in snap.metadata.partition_columns]
    pieces = []
    deleted: dict[str, set[int]] = {}
    async with LocalStore(path) as store:
        for add in snap.files.values():
            dv = await read_deletion_vector(store, add)
            rel = decode_uri_path(add.path)
            if len(dv):
                deleted[rel] = set(dv)
            data = pq.read_table(path / rel)
            keep = [i not in dv for i in range(data.num_rows)]
            data = data.filter(pa.array(keep, pa.bool_()))
            data = data.rename_columns([logical.get(c, c) for c in data.column_names])
            pieces.append(data.select(data_columns))
    ours = pa.concat_tables(pieces) if pieces else None
    theirs = pa.table(deltalake.DeltaTable(str(path)).scan().read_all()).select(data_columns)
    assert ours is not None
    ours = ours.cast(theirs.schema)  # e.g. INT96 timestamps read naive, delta-rs says UTC
    assert _rows(ours) == _rows(theirs)
    assert deleted == {k: v for k, v in _deleted_positions_delta_rs(path).items() if v}
