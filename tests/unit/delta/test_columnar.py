"""Columnar log replay (:mod:`rlcd.delta._columnar`) against the object replay it replaces.

Pure: checkpoints are Arrow tables built in memory in the shape a Parquet checkpoint is read in
(Spark's struct types: int32 DV offsets, the transient ``maxRowIndex``), commits literal actions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from itertools import pairwise
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcd.delta._checkpoint import checkpoint_actions
from rlcd.delta._columnar import (
    BatchIndex,
    FileActions,
    add_files,
    checkpoint_file_actions,
    file_actions_of,
    needs_stats_parsed,
    projection,
    remove_files,
    replay_files,
    take_rows,
)
from rlcd.delta.actions import Action, ActionError, AddFile, Metadata, Protocol, RemoveFile
from rlcd.delta.dv.descriptor import DeletionVectorDescriptor
from rlcd.delta.replay import canonical_path, replay, replay_columns

_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)
_STATS_PARSED = pa.struct(
    [("numRecords", pa.int64()), ("minValues", pa.struct([("id", pa.int64())]))]
)
CHECKPOINT = pa.schema(
    [
        (
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", _MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("tags", _MAP),
                    ("deletionVector", _DV),
                    ("stats", pa.string()),
                    ("stats_parsed", _STATS_PARSED),
                ]
            ),
        ),
        (
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("tags", _MAP),
                    ("deletionVector", _DV),
                ]
            ),
        ),
    ]
)

DVS = [
    None,
    DeletionVectorDescriptor("u", "ab" + "0" * 20, 34, 2, offset=1),
    DeletionVectorDescriptor("u", "ab" + "0" * 20, 40, 3, offset=90),
    DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 6),
    DeletionVectorDescriptor("p", "s3://b/t/dv.bin", 40, 1, offset=4),
]
PATHS = ["a.parquet", "p=1/b.parquet", "/abs/c.parquet", "file:/abs/c.parquet", "b%20c.parquet"]


def _add(path: str, dv: int, size: int) -> AddFile:
    stats = f'{{"numRecords":{size},"minValues":{{"id":1}}}}' if size % 3 else None
    return AddFile(
        path=path,
        partition_values={"p": str(size % 2)} if size % 2 else {},
        size=size,
        modification_time=1000 + size,
        data_change=bool(size % 2),
        stats=stats,
        tags={"k": str(size)} if size % 4 == 0 else None,
        deletion_vector=DVS[dv],
    )


def _remove(path: str, dv: int, when: int) -> RemoveFile:
    return RemoveFile(path=path, deletion_timestamp=when, deletion_vector=DVS[dv])


def _checkpoint(actions: list[AddFile | RemoveFile]) -> pa.Table:
    """A checkpoint table as a Parquet read of it gives (one action per row)."""
    rows = [{a.KIND: a.to_json()} for a in actions]
    return pa.Table.from_pylist(rows, schema=CHECKPOINT)


def _essence(add: AddFile) -> tuple[Any, ...]:
    return (
        add.path,
        add.dv_unique_id,
        add.deletion_vector,
        add.size,
        add.modification_time,
        add.data_change,
        add.stats,
        dict(add.partition_values),
        dict(add.tags) if add.tags else None,
        add.num_records,
    )


def _expected(
    checkpoint: list[AddFile | RemoveFile], commits: list[list[Action]]
) -> tuple[list[tuple[Any, ...]], set[tuple[str, str | None, int | None]], list[str]]:
    """The live files by the replay rules, the tombstones by the protocol's (the newest remove
    per (path, DV) key, unless an add of that key came after it), and the live paths in the
    order they first appeared (a path that stopped being live counts from its re-add)."""
    live: dict[str, AddFile] = {}
    gone: dict[tuple[str, str | None], RemoveFile] = {}
    for a in checkpoint:
        key = canonical_path(a.path)
        if isinstance(a, AddFile):
            live[key] = a
        else:
            gone[(key, a.dv_unique_id)] = a
    for actions in commits:
        for a in actions:
            key = canonical_path(a.path)  # type: ignore[union-attr]
            if isinstance(a, AddFile):
                live[key] = a
                gone.pop((key, a.dv_unique_id), None)
            elif isinstance(a, RemoveFile):
                if key in live and live[key].dv_unique_id == a.dv_unique_id:
                    del live[key]
                gone[(key, a.dv_unique_id)] = a
    tombs = {(r.path, r.dv_unique_id, r.deletion_timestamp) for r in gone.values()}
    return sorted(map(_essence, live.values()), key=repr), tombs, list(live)


def _got(adds: pa.Table, tombstones: pa.Table) -> tuple[list[tuple[Any, ...]], set[Any], list[str]]:
    files = add_files(adds)
    assert adds["num_records"].to_pylist() == [a.num_records for a in files]
    assert adds["dv_unique_id"].to_pylist() == [a.dv_unique_id for a in files]
    rows = tombstones.to_pylist()
    tombs = set()
    for row in rows:
        dv = row["deletion_vector"]
        uid = None if dv is None else DeletionVectorDescriptor.from_json(dv).unique_id
        tombs.add((row["path"], uid, row["deletion_timestamp"]))
    assert len(tombs) == len(rows)
    return sorted(map(_essence, files), key=repr), tombs, [canonical_path(a.path) for a in files]


ACTION = st.tuples(
    st.sampled_from(["add", "remove"]),
    st.sampled_from(PATHS),
    st.integers(0, len(DVS) - 1),
    st.integers(1, 50),
)


def _action(kind: str, path: str, dv: int, n: int) -> AddFile | RemoveFile:
    return _add(path, dv, n) if kind == "add" else _remove(path, dv, n)


@settings(max_examples=300, deadline=None)
@given(
    checkpoint=st.lists(ACTION, max_size=8),
    commits=st.lists(st.lists(ACTION, max_size=5), max_size=5),
    as_parquet=st.booleans(),
)
def test_columnar_replay_equals_object_replay(
    checkpoint: list[tuple[str, str, int, int]],
    commits: list[list[tuple[str, str, int, int]]],
    as_parquet: bool,
) -> None:
    """Any checkpoint and commits replay to the live files and tombstones the rules give, in
    log order; the same through a snapshot moved forward commit by commit."""
    cp_actions = [_action(*a) for a in checkpoint]
    commit_actions: list[list[Action]] = [[_action(*a) for a in c] for c in commits]
    files = (
        checkpoint_file_actions(_checkpoint(cp_actions))
        if as_parquet
        else file_actions_of(cp_actions)
    )
    state = replay_files([files], enumerate(commit_actions, start=1))
    got = _got(state.adds, state.tombstones)
    assert got == _expected(cp_actions, commit_actions)
    header: list[Action] = [Protocol(1, 2), Metadata(id="t")]
    snapshot = replay("t", [], checkpoint=(0, header + cp_actions))
    for version, actions in enumerate(commit_actions, start=1):
        snapshot = replay("t", [(version, actions)], base=snapshot)
    assert _got(snapshot.adds, snapshot.tombstone_rows) == got


def test_add_files_equal_the_checkpoint_parser() -> None:
    """A few rows back as objects equal what parsing the checkpoint row by row gives."""
    actions = [
        _add(p, dv, n)
        for n, (p, dv) in enumerate(zip(PATHS, range(len(DVS)), strict=True), start=1)
    ]
    table = _checkpoint(actions)
    expected = [a for a in checkpoint_actions(table) if isinstance(a, AddFile)]
    assert add_files(checkpoint_file_actions(table).adds) == expected


@pytest.mark.parametrize(
    ("stats", "rows"),
    [
        ('{"numRecords":12,"minValues":{}}', 12),
        ('{"numRecords":12}', 12),
        ('{ "numRecords": 7 }', 7),
        ('{"minValues":{"numRecords":3},"numRecords":5}', 5),
        ('{"numRecords":1.5}', None),
        ('{"numRecords":true}', None),
        ('{"numRecords":007}', None),
        ("not json", None),
        ("[1]", None),
        (None, None),
    ],
)
def test_num_records_reads_the_stats_as_add_file_does(stats: str | None, rows: int | None) -> None:
    """The vectorised numRecords agrees with :attr:`AddFile.num_records` on odd stats too."""
    add = AddFile(path="x", size=1, stats=stats)
    assert add.num_records == rows
    for files in (file_actions_of([add]), checkpoint_file_actions(_checkpoint([add]))):
        assert files.adds["num_records"].to_pylist() == [rows]


def test_stats_parsed_alone_gives_the_stats_text() -> None:
    """Adds checkpointed with writeStatsAsJson=false get the text the row parser builds."""
    row = {
        "add": {
            "path": "x",
            "size": 3,
            "partitionValues": [],
            "stats_parsed": {"numRecords": 9, "minValues": {"id": 4}},
        }
    }
    table = pa.Table.from_pylist([row], schema=CHECKPOINT)
    projected = table.select(["add"])  # what projection() reads, stats_parsed included here
    assert needs_stats_parsed(projected)
    files = checkpoint_file_actions(projected, table)
    (expected,) = checkpoint_actions(table)
    assert add_files(files.adds) == [expected]
    assert files.adds["num_records"].to_pylist() == [9]


def test_projection_reads_only_what_replay_keeps() -> None:
    """Stats structs and the remove's tags are not read (checkpoints keep none); absent fields
    (the remove's size here) are not asked for."""
    columns = projection(CHECKPOINT)
    assert "add.stats_parsed.numRecords" in columns
    assert "add.stats_parsed" not in columns
    assert "remove.dataChange" in columns
    assert "remove.tags" not in columns
    assert "add.baseRowId" not in columns and "remove.size" not in columns
    assert {"add.path", "add.deletionVector", "remove.deletionVector"} <= set(columns)


def test_a_later_checkpoint_row_of_a_path_wins() -> None:
    """A checkpoint listing a path twice keeps the later row, as the object replay does."""
    first, second = _add("a", 0, 1), _add("a", 1, 2)
    state = replay_files([checkpoint_file_actions(_checkpoint([first, second]))], [])
    assert add_files(state.adds) == [second]
    assert state.paths.adds is None  # "a" is its own canonical spelling


def test_a_path_in_two_checkpoint_files_keeps_the_later_row_in_the_first_place() -> None:
    """Keys repeated across checkpoint files (chunks), in two spellings, are found."""
    first = [_add("/abs/c.parquet", 0, 1), _add("a.parquet", 0, 2), _add("b%20c.parquet", 0, 3)]
    second = [_add("p=1/b.parquet", 0, 4), _add("file:/abs/c.parquet", 1, 5)]
    parts = [checkpoint_file_actions(_checkpoint(p)) for p in (first, second)]
    state = replay_files(parts, [])
    assert add_files(state.adds) == [second[1], *first[1:], second[0]]


def test_a_tombstone_keeps_what_a_checkpoint_writes_of_it() -> None:
    """A commit's remove, as a tombstone, keeps every field a checkpoint writes (its size, for
    vacuum's reclaimable bytes; its partition values), and drops its stats and tags."""
    remove = RemoveFile(
        path="p=1/a",
        deletion_timestamp=5,
        data_change=False,
        extended_file_metadata=True,
        partition_values={"p": "1"},
        size=123,
        stats='{"numRecords":3}',
        tags={"compactedInto": "b"},
        deletion_vector=DVS[1],
        base_row_id=7,
        default_row_commit_version=2,
    )
    tombstones = replay_files([], [(1, [remove])]).tombstones
    assert remove_files(tombstones) == [dataclasses.replace(remove, stats=None, tags=None)]


def test_no_checkpoint_and_no_commits_is_empty() -> None:
    """A log of only non-file actions has no live files and no tombstones."""
    state = replay_files([], [])
    assert state.adds.num_rows == state.tombstones.num_rows == 0


def test_file_actions_keep_the_other_actions() -> None:
    """Non-file actions of a JSON checkpoint are handed back as objects."""
    files = file_actions_of([_add("a", 0, 1)])
    assert isinstance(files, FileActions)
    assert files.others == []


def test_held_bytes_counts_buffers_once_and_the_objects_made() -> None:
    """A snapshot's held bytes are its Arrow buffers, each whole though a later snapshot holds
    only a slice of it, plus its objects once :attr:`Snapshot.files` made them."""
    header: list[Action] = [Protocol(1, 2), Metadata(id="t")]
    adds: list[Action] = [AddFile(path=f"f{i}", size=i, stats="{}") for i in range(50)]
    snapshot = replay("t", [(0, header + adds)])
    arrow = snapshot.adds.get_total_buffer_size() + snapshot.tombstone_rows.get_total_buffer_size()
    assert arrow < snapshot.held_bytes() < arrow + 10_000
    # one removal: the rows around it are slices of the same buffers, counted once
    later = replay("t", [(1, [RemoveFile(path="f7", deletion_timestamp=1)])], base=snapshot)
    assert later.adds.num_rows == 49
    whole = snapshot.adds.get_total_buffer_size()
    assert whole <= later.adds.get_total_buffer_size() < whole + 5_000  # not twice
    before = snapshot.held_bytes()
    assert len(snapshot.files) == 50
    assert snapshot.held_bytes() >= before + 50 * 1000


# paths an update must find again: absolute in two spellings, URL-encoded, partitioned
_UPDATE_PATHS = [*PATHS, "p=a%20b/d.parquet", "p=a%3Ab/e%25f.parquet", "file:///abs/g.parquet"]
_UPDATE_ACTION = st.tuples(
    st.sampled_from(["add", "add", "remove"]),
    st.sampled_from(_UPDATE_PATHS),
    st.integers(0, len(DVS) - 1),
    st.integers(1, 50),
)


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.lists(_UPDATE_ACTION, max_size=6), max_size=3),
    commits=st.lists(st.lists(_UPDATE_ACTION, min_size=1, max_size=6), max_size=12),
    cuts=st.sets(st.integers(1, 11)),
)
def test_advancing_by_commits_equals_loading_from_scratch(
    parts: list[list[tuple[str, str, int, int]]],
    commits: list[list[tuple[str, str, int, int]]],
    cuts: set[int],
) -> None:
    """A snapshot moved forward a few commits at a time, from a checkpoint of several files
    (one chunk each, a path in more than one), holds the very tables a replay of every commit
    at once gives: rows and their order, tombstones, and the canonical paths it carries."""
    header: list[Action] = [Protocol(1, 2), Metadata(id="t")]
    checkpoint = [checkpoint_file_actions(_checkpoint([_action(*a) for a in p])) for p in parts]
    log: list[tuple[int, list[Action]]] = [
        (version, [_action(*a) for a in c]) for version, c in enumerate(commits, start=1)
    ]
    files = [
        FileActions(f.adds, f.tombstones, header if i == 0 else ())
        for i, f in enumerate(checkpoint)
    ]
    files = files or [file_actions_of(header)]
    scratch = replay_columns("t", log, checkpoint=(0, files))
    snapshot = replay_columns("t", [], checkpoint=(0, files))
    bounds = [0, *sorted(c for c in cuts if c < len(log)), len(log)]
    for lo, hi in pairwise(bounds):
        snapshot = replay_columns("t", log[lo:hi], base=snapshot)
    assert snapshot.version == scratch.version
    assert snapshot.adds.equals(scratch.adds)
    # tombstones are a set: an update moves the ones its commits touch to the end
    tombstones = [snapshot.tombstone_rows.to_pylist(), scratch.tombstone_rows.to_pylist()]
    assert sorted(tombstones[0], key=repr) == sorted(tombstones[1], key=repr)
    assert snapshot.paths is not None and scratch.paths is not None
    carried = (snapshot.paths.adds, snapshot.paths.tombstones)
    for held, rows in zip(carried, (snapshot.adds, snapshot.tombstone_rows), strict=True):
        paths = rows["path"].to_pylist()
        assert (paths if held is None else held.to_pylist()) == [canonical_path(p) for p in paths]


def test_many_updates_recombine_the_chunks_they_split() -> None:
    """Updates that each touch a row split the table into more and more slices; past the
    bound it is made one chunk again, holding what a replay from scratch holds."""
    header: list[Action] = [Protocol(1, 2), Metadata(id="t")]
    adds: list[Action] = [_add(f"f{i}", 0, i) for i in range(1, 301)]
    log: list[tuple[int, list[Action]]] = [
        (v, [_remove(f"f{2 * v}", 0, v), _add(f"g{v}", 0, v)]) for v in range(1, 151)
    ]
    snapshot = replay("t", [], checkpoint=(0, header + adds))
    chunks = []
    for version, actions in log:
        snapshot = replay("t", [(version, actions)], base=snapshot)
        chunks.append(snapshot.adds.column(0).num_chunks)
    assert max(chunks) <= 257 and chunks[-1] < max(chunks)  # recombined on the way
    assert snapshot.adds.equals(replay("t", log, checkpoint=(0, header + adds)).adds)


def test_actions_with_any_mapping_make_the_rows_of_their_json() -> None:
    """Actions are turned into rows from their attributes: a map held as any Mapping (not a
    dict) and a DV's unknown members give the rows their JSON gives."""
    dv = dataclasses.replace(DVS[1], extra={"maxRowIndex": 9})  # type: ignore[type-var]
    add = dataclasses.replace(
        _add("p=1/x.parquet", 0, 4),
        partition_values=MappingProxyType({"p": "1", "q": None}),
        tags=MappingProxyType({"k": "v"}),
        deletion_vector=dv,
    )
    removed = RemoveFile(
        path="y", partition_values=MappingProxyType({"p": "1"}), deletion_vector=dv, size=3
    )
    files = file_actions_of([add, removed])
    as_json = file_actions_of(
        [AddFile.from_json(add.to_json()), RemoveFile.from_json(removed.to_json())]
    )
    assert files.adds.equals(as_json.adds)
    assert files.tombstones.equals(as_json.tombstones)
    assert add_files(files.adds)[0].partition_values == {"p": "1", "q": None}


def test_an_update_leaves_the_rows_it_does_not_change_as_they_are() -> None:
    """A remove whose DV is not the live one's touches a path but changes nothing: its row
    stays in place, untouched (no object made of it), and the rows around it too."""
    header: list[Action] = [Protocol(1, 2), Metadata(id="t")]
    adds: list[Action] = [_add(f"f{i}", 1, i) for i in range(1, 6)]
    snapshot = replay("t", [], checkpoint=(0, header + adds))
    later = replay("t", [(1, [_remove("f2", 0, 7), _add("f4", 2, 9)])], base=snapshot)
    whole = replay(
        "t", [(1, [_remove("f2", 0, 7), _add("f4", 2, 9)])], checkpoint=(0, header + adds)
    )
    assert later.adds.equals(whole.adds)
    assert later.adds["path"].to_pylist() == ["f1", "f2", "f3", "f4", "f5"]
    assert later.adds.slice(0, 3).equals(snapshot.adds.slice(0, 3))
    assert later.files["f4"].size == 9


def test_take_rows_keeps_the_order_asked_across_chunks() -> None:
    """Rows from several chunks, out of order and repeated, come back as asked; a row outside
    the table is refused."""
    table = pa.Table.from_batches(pa.table({"n": list(range(10))}).to_batches(max_chunksize=3))
    assert take_rows(table, [9, 0, 4, 4, 3]).column("n").to_pylist() == [9, 0, 4, 4, 3]
    assert take_rows(table, []).num_rows == 0
    with pytest.raises(IndexError):
        take_rows(table, [10])


def test_a_batch_index_takes_from_the_batch_each_row_is_in() -> None:
    """Rows in ascending order (a bin's) and in any order come from the right batches, empty
    batches among them; one index serves many takes."""
    parts = [
        pa.record_batch({"n": pa.array(range(a, b), pa.int64())})
        for a, b in ((0, 3), (3, 3), (3, 7), (7, 10))
    ]
    index = BatchIndex(pa.Table.from_batches(parts))
    for rows in ([0, 2, 3, 6, 7, 9], [3], [9, 3, 3, 0], list(range(10))):
        assert index.take(rows).column("n").to_pylist() == rows


def _rarely(rare: st.SearchStrategy[Any], usual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``rare`` one draw in eight: a list of rows is then not almost always one error."""
    return st.integers(0, 7).flatmap(lambda k: rare if k == 0 else usual)


_GOOD_DVS = [None, *(dv.to_json() for dv in DVS if dv is not None)]
_BAD_DVS = st.fixed_dictionaries(
    {"storageType": st.sampled_from(["u", "x"]), "pathOrInlineDv": st.just("short")},
    optional={"sizeInBytes": st.integers(0, 9), "cardinality": st.integers(0, 9)},
)
_TEXT = st.text("ab=/%\x00é", max_size=4)
_STRING_MAPS = st.one_of(
    st.none(), st.lists(st.tuples(_TEXT, st.one_of(st.none(), _TEXT)), max_size=3)
)
_INTS = st.one_of(st.none(), st.integers(0, 2**62))
_ADD_ROWS = st.fixed_dictionaries(
    {
        "path": _rarely(st.none(), st.sampled_from(PATHS)),
        "partitionValues": _STRING_MAPS,
        "size": _rarely(st.none(), st.integers(-1, 2**62)),
        "modificationTime": _INTS,
        "dataChange": st.one_of(st.none(), st.booleans()),
        "stats": st.sampled_from([None, '{"numRecords":3}', "{}", "junk"]),
        "tags": _STRING_MAPS,
        "deletionVector": _rarely(_BAD_DVS, st.sampled_from(_GOOD_DVS)),
        "baseRowId": _INTS,
        "defaultRowCommitVersion": _INTS,
        "clusteringProvider": st.sampled_from([None, "liquid"]),
    }
)
_ADD_ROW_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", _MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", _MAP),
        ("deletionVector", _DV),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
    ]
)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_ADD_ROWS, max_size=6))
def test_add_files_from_columns_equal_the_row_parser(rows: list[dict[str, Any]]) -> None:
    """Checkpoint add rows with each member null or set (empty and null maps, null map values,
    bad DVs, null required fields) become the objects the row parser makes of them, or fail
    with its error."""
    table = pa.Table.from_pylist(
        [{"add": r} for r in rows], schema=pa.schema([("add", _ADD_ROW_TYPE)])
    )
    adds = checkpoint_file_actions(table).adds
    parsed = _objects_or_error(
        lambda: [a for a in checkpoint_actions(table) if isinstance(a, AddFile)]
    )
    assert _objects_or_error(lambda: add_files(adds)) == parsed


def _objects_or_error(make: Callable[[], list[Any]]) -> list[Any] | str:
    try:
        return make()
    except ActionError as exc:
        return f"ActionError: {exc}"
