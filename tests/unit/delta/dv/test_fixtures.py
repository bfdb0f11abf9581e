"""Every DV in the fixture tables: decoded, checked, re-encoded byte for byte, and compared
with an independent reader (``deltalake``).

DV descriptors come straight from the JSON commits and the classic checkpoint Parquet files (no
rlcd log code), so this tests only the DV codec. The fixtures hold 64 single-DV files, including
five no commit references; multi-DV files are covered by the synthetic tests in test_codec.py.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.delta.dv import (
    DeletionVectorDescriptor,
    decode_dv_file,
    dv_byte_range,
    encode_dv_file,
    encode_dv_range,
    load_dv,
)
from tests.conftest import FIXTURES, fixture_names, fixture_table

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

DV_TABLES = [name for name in fixture_names() if any((FIXTURES / name).rglob("*.bin"))]
DV_FILES = sorted(FIXTURES.glob("*/**/*.bin"))


def _commits(table: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            if line.strip():
                yield int(commit.stem), json.loads(line)


def _checkpoint_rows(table: Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(version, action kind, row) for add/remove rows of classic checkpoints."""
    for checkpoint in sorted((table / "_delta_log").glob("*.checkpoint.parquet")):
        data = pq.read_table(checkpoint)
        for kind in ("add", "remove"):
            if kind in data.column_names:
                for row in data.column(kind).to_pylist():
                    if row:
                        yield int(checkpoint.name.split(".")[0]), kind, row


def _json_descriptors(table: Path) -> list[tuple[int, str, dict[str, Any]]]:
    """(version, data file path, raw deletionVector) of every add/remove in the commits."""
    found = []
    for version, action in _commits(table):
        for kind in ("add", "remove"):
            body = action.get(kind)
            if body and body.get("deletionVector"):
                found.append((version, body["path"], body["deletionVector"]))
    return found


def _live_dvs(table: Path) -> tuple[int, dict[str, DeletionVectorDescriptor]]:
    """Latest version and live add path -> DV, replaying the newest checkpoint plus commits."""
    live: dict[tuple[str, str | None], dict[str, Any]] = {}

    def key(body: dict[str, Any]) -> tuple[str, str | None]:
        dv = body.get("deletionVector")
        return body["path"], DeletionVectorDescriptor.from_json(dv).unique_id if dv else None

    rows = list(_checkpoint_rows(table))
    start = max((v for v, _, _ in rows), default=-1) + 1
    for version, kind, row in rows:
        if version == start - 1 and kind == "add":
            live[key(row)] = row
    latest = start - 1
    for version, action in _commits(table):
        if version < start:
            continue
        latest = max(latest, version)
        if "add" in action:
            live[key(action["add"])] = action["add"]
        elif "remove" in action:
            live.pop(key(action["remove"]), None)
    dvs = {
        path: DeletionVectorDescriptor.from_json(body["deletionVector"])
        for (path, _), body in live.items()
        if body.get("deletionVector")
    }
    return latest, dvs


def test_fixture_inventory() -> None:
    """The DV fixtures are present (guards against a vacuous pass)."""
    assert len(DV_TABLES) >= 5
    assert len(DV_FILES) >= 60
    assert sum(len(_json_descriptors(fixture_table(t))) for t in DV_TABLES) >= 50


@pytest.mark.parametrize("name", DV_TABLES)
def test_every_committed_dv_round_trips(name: str) -> None:
    """descriptor -> ranged bytes -> bitmap -> re-encoded bytes is the identity, cardinality ok."""
    table = fixture_table(name)
    for version, data_path, raw in _json_descriptors(table):
        descriptor = DeletionVectorDescriptor.from_json(raw)
        assert descriptor.to_json() == raw
        assert list(descriptor.to_json()) == list(raw)  # Spark's key order
        dv_file = descriptor.file_path()
        assert dv_file is not None
        data = (table / dv_file).read_bytes()
        start, end = dv_byte_range(descriptor)
        ranged = data[start:end]
        assert len(ranged) == end - start
        bitmap = load_dv(descriptor, file_bytes=ranged, table=name, path=data_path, version=version)
        assert len(bitmap) == descriptor.cardinality
        assert encode_dv_range(bitmap) == ranged
        whole = load_dv(descriptor, file_bytes=data, table=name, path=data_path, data_start=0)
        assert whole == bitmap


@pytest.mark.parametrize("name", DV_TABLES)
def test_checkpoint_descriptors_match_commits(name: str) -> None:
    """Checkpoint structs (with null maxRowIndex) parse to the descriptors the commits hold."""
    table = fixture_table(name)
    from_json = {
        d.unique_id: d
        for d in (DeletionVectorDescriptor.from_json(r) for _, _, r in _json_descriptors(table))
    }
    rows = [row for _, _, row in _checkpoint_rows(table) if row.get("deletionVector")]
    for row in rows:
        descriptor = DeletionVectorDescriptor.from_json(row["deletionVector"])
        assert from_json[descriptor.unique_id] == descriptor


@pytest.mark.parametrize("path", DV_FILES, ids=lambda p: f"{p.parent.name}/{p.name[16:24]}")
def test_every_dv_file_reencodes_identically(path: Path) -> None:
    """Decoding a whole DV file (referenced or not) and re-encoding it is byte-identical."""
    data = path.read_bytes()
    found = decode_dv_file(data)
    assert found
    encoded, ranges = encode_dv_file([bitmap for _, _, bitmap in found])
    assert encoded == data
    assert ranges == [(offset, size) for offset, size, _ in found]


@pytest.mark.parametrize("name", DV_TABLES)
def test_positions_match_deltalake(name: str) -> None:
    """The latest snapshot's deleted rows equal deltalake's selection vectors."""
    from deltalake import DeltaTable

    table = fixture_table(name)
    latest, live = _live_dvs(table)
    delta_table = DeltaTable(str(table))
    assert delta_table.version() == latest

    ours: dict[str, list[int]] = {}
    for data_path, descriptor in live.items():
        dv_file = descriptor.file_path()
        assert dv_file is not None
        start, end = dv_byte_range(descriptor)
        ranged = (table / dv_file).read_bytes()[start:end]
        bitmap = load_dv(descriptor, file_bytes=ranged, table=name, path=data_path)
        ours[unquote(data_path)] = list(bitmap)

    root = os.path.realpath(table)
    theirs: dict[str, list[int]] = {}
    for row in pa.table(delta_table.deletion_vectors().read_all()).to_pylist():
        absolute = os.path.realpath(unquote(urlparse(row["filepath"]).path))
        relative = os.path.relpath(absolute, root)
        # True = keep; rows past the end of the vector are kept
        theirs[relative] = [i for i, keep in enumerate(row["selection_vector"]) if not keep]
    assert ours
    assert ours == theirs
