"""Vacuum's rules: which keys a lite or full vacuum deletes given a snapshot, tombstones, a
listing and the clock; and the retention syntax. Pure: literal actions replayed into a
snapshot's columns, no store."""

from __future__ import annotations

import json
from uuid import UUID

import pyarrow as pa
import pytest

from rlcd.delta.actions import AddFile, RemoveFile, parse_commit
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.replay import Snapshot, replay
from rlcd.errors import CorruptLogError
from rlcd.operations._vacuum_rules import (
    Outside,
    VacuumRules,
    _key,
    _keys,
    is_hidden,
    parse_interval,
    parse_retain,
)

ROOT = "s3://bucket/t"
HOUR = 3_600_000
NOW = 1_000 * HOUR
DV = DeletionVectorDescriptor.for_file(
    uuid=UUID(int=7), prefix="ab", offset=1, size_in_bytes=40, cardinality=2
)
DV_KEY = f"ab/deletion_vector_{UUID(int=7)}.bin"


def _gone(
    path: str, *, at: int | None, dv: DeletionVectorDescriptor | None = None, size: int = 100
) -> RemoveFile:
    return RemoveFile(path=path, deletion_timestamp=at, size=size, deletion_vector=dv)


def _line(kind: str, body: dict[str, object]) -> bytes:
    return json.dumps({kind: body}).encode() + b"\n"


SETUP = _line("protocol", {"minReaderVersion": 1, "minWriterVersion": 2}) + _line(
    "metaData", {"id": "t", "format": {"provider": "parquet"}, "partitionColumns": []}
)


def _snapshot(files: list[AddFile], tombstones: list[RemoveFile]) -> Snapshot:
    """A snapshot holding exactly these live files and tombstones (a checkpoint's rows: its
    removes never shadow its adds)."""
    return replay(ROOT, [], checkpoint=(0, [*parse_commit(SETUP), *files, *tombstones]))


def _rules(
    files: list[AddFile] = [],  # noqa: B006 - never mutated
    tombstones: list[RemoveFile] = [],  # noqa: B006
    *,
    retention: int = 0,
    partitions: tuple[str, ...] = (),
    cdc_files: tuple[str, ...] = (),
) -> VacuumRules:
    snapshot = _snapshot(files, tombstones)
    return VacuumRules.of(
        ROOT,
        partition_columns=partitions,
        files=snapshot.adds,
        tombstones=snapshot.tombstone_rows,
        now_ms=NOW,
        retention_ms=retention,
        cdc_files=cdc_files,
    )


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("interval 1 week", 7 * 24 * HOUR),
        ("INTERVAL 2 days 12 hours", 60 * HOUR),
        ("interval 30 minutes", HOUR // 2),
        ("interval 0 seconds", 0),
        ("1 day", 24 * HOUR),
        ("interval 1 weeks", 7 * 24 * HOUR),
        ("interval 500 milliseconds", 500),
    ],
)
def test_delta_intervals_parse(text: str, ms: int) -> None:
    """The property's interval syntax: optional ``interval``, any case, plural units, sums."""
    assert parse_interval(text) == ms


@pytest.mark.parametrize("text", ["interval 1 month", "interval 1 year", "", "week", "1 fortnight"])
def test_intervals_without_a_fixed_length_are_refused(text: str) -> None:
    """Months and years vary in length (Delta refuses them too); nonsense says what is wanted."""
    with pytest.raises(ValueError, match=text or "interval"):
        parse_interval(text)


@pytest.mark.parametrize(
    ("text", "ms"),
    [("0h", 0), ("168h", 168 * HOUR), ("7d", 168 * HOUR), ("1d12h", 36 * HOUR), ("30m", HOUR // 2)],
)
def test_retain_takes_short_durations(text: str, ms: int) -> None:
    """``--retain`` takes 0h, 168h, 7d, 1d12h, 30m (and Delta intervals)."""
    assert parse_retain(text) == ms
    assert parse_retain("interval 2 hours") == 2 * HOUR


def test_a_tombstone_expires_strictly_before_the_cutoff() -> None:
    """Deleted exactly at ``now - retention`` is still inside the window; a millisecond
    earlier it is not; a tombstone without a timestamp counts as deleted at 0."""
    on_edge = _gone("edge.parquet", at=NOW - HOUR)
    before = _gone("before.parquet", at=NOW - HOUR - 1)
    undated = _gone("undated.parquet", at=None)
    rules = _rules([], [on_edge, before, undated], retention=HOUR)
    assert rules.lite_candidates() == ["before.parquet", "undated.parquet"]
    assert "edge.parquet" in rules.valid


def test_a_live_file_is_never_a_candidate_even_with_an_expired_tombstone() -> None:
    """A DV update removes (path, old DV) and adds (path, new DV): the data file stays, the old
    DV file goes, the new one stays."""
    live = AddFile(path="p.parquet", size=100, deletion_vector=DV)
    old_dv = DeletionVectorDescriptor.for_file(
        uuid=UUID(int=8), offset=1, size_in_bytes=40, cardinality=1
    )
    rules = _rules([live], [_gone("p.parquet", at=0, dv=old_dv)])
    assert rules.lite_candidates() == [f"deletion_vector_{UUID(int=8)}.bin"]
    assert {"p.parquet", DV_KEY} <= rules.valid


def test_a_dv_file_is_found_from_its_descriptor() -> None:
    """A ``u`` DV's file is ``<prefix>/deletion_vector_<uuid>.bin`` under the table root; a
    ``p`` DV's is its absolute path, used when it lies under the root."""
    absolute = DeletionVectorDescriptor(
        storage_type="p",
        path_or_inline_dv=f"{ROOT}/dv/deletion_vector_x%20y.bin",
        size_in_bytes=40,
        cardinality=1,
        offset=1,
    )
    rules = _rules([], [_gone("a.parquet", at=0, dv=DV), _gone("b.parquet", at=0, dv=absolute)])
    assert rules.lite_candidates() == [
        "a.parquet",
        DV_KEY,
        "b.parquet",
        "dv/deletion_vector_x y.bin",
    ]


def test_a_dv_file_shared_with_a_live_file_stays() -> None:
    """One DV file can hold the DVs of several files: it goes only when no valid one uses it."""
    live = AddFile(path="live.parquet", size=1, deletion_vector=DV)
    rules = _rules([live], [_gone("gone.parquet", at=0, dv=DV)])
    assert rules.lite_candidates() == ["gone.parquet"]


def test_full_mode_keeps_young_unreferenced_files() -> None:
    """A writer in flight has written files no commit names yet: younger than the cutoff,
    they stay; older ones go."""
    rules = _rules([], [], retention=HOUR)
    assert rules.listed("old.parquet", NOW - HOUR - 1)
    assert not rules.listed("young.parquet", NOW - HOUR)
    assert not rules.listed("young.parquet", NOW)


def test_full_mode_keeps_what_a_version_in_the_window_reads() -> None:
    """Live files, their DV files and unexpired tombstones are kept whatever their age."""
    rules = _rules(
        [AddFile(path="x=1/live.parquet", size=1, deletion_vector=DV)],
        [_gone("recent.parquet", at=NOW - 1), _gone("old.parquet", at=0)],
        retention=HOUR,
    )
    for key in ("x=1/live.parquet", DV_KEY, "recent.parquet"):
        assert not rules.listed(key, 0), key
    assert rules.listed("old.parquet", 0)


@pytest.mark.parametrize(
    ("key", "hidden"),
    [
        ("_delta_log/00000000000000000000.json", True),
        ("_delta_log/_sidecars/a.parquet", True),
        ("_rlcd/staging/x.parquet", True),
        ("x=1/.part-0.parquet.crc", True),
        ("_SUCCESS", True),
        ("metadata/v1.json", True),
        ("a/_tmp/b.parquet", True),
        ("_change_data/cdc-0.parquet", False),
        ("_delta_index/x", False),
        ("_p=1/part-0.parquet", False),
        ("x=1/part-0.parquet", False),
        ("deletion_vector_0.bin", False),
    ],
)
def test_hidden_paths_follow_spark(key: str, hidden: bool) -> None:
    """Spark's rule, on every segment: ``_``/``.`` names and ``metadata`` are hidden, but not
    ``_change_data``, ``_delta_index`` nor a partition folder of a column named ``_p``."""
    assert is_hidden(key, ["_p"]) is hidden
    rules = _rules(partitions=("_p",))
    assert rules.listed(key, 0) is not hidden


def test_paths_outside_the_root_are_reported_never_deleted() -> None:
    """An absolute path elsewhere and a relative one climbing out with ``..`` are reported;
    the rest of the tombstones are still vacuumed."""
    rules = _rules(
        [],
        [
            _gone("s3://other/t/a.parquet", at=0),
            _gone("../sibling/b.parquet", at=0),
            _gone("x/%2E%2E/c.parquet", at=0),
            _gone(f"{ROOT}/ok.parquet", at=0),
        ],
    )
    assert rules.lite_candidates() == ["ok.parquet"]
    assert [o.path for o in rules.outside()] == [
        "s3://other/t/a.parquet",
        "../sibling/b.parquet",
        "x/%2E%2E/c.parquet",
    ]
    assert all(isinstance(o, Outside) and o.reason for o in rules.outside())


def test_a_live_file_outside_the_root_is_not_reported() -> None:
    """A live file elsewhere (a shallow clone's) is no key of the table: neither kept nor
    reported; only expired tombstones' paths are."""
    rules = _rules([AddFile(path="s3://other/a.parquet", size=1)], [])
    assert rules.outside() == [] and rules.valid == frozenset()


def test_lite_mode_takes_change_data_files_unless_a_version_reads_them() -> None:
    """The ``cdc`` files the commits named are lite candidates (their age is judged once
    headed), as Spark's lite mode deletes old ``_change_data`` files; one outside the table is
    not."""
    rules = _rules(
        [],
        [_gone("a.parquet", at=0)],
        cdc_files=("_change_data/cdc-1.parquet", "s3://other/cdc-2.parquet"),
    )
    assert rules.lite_candidates() == ["a.parquet", "_change_data/cdc-1.parquet"]
    assert not rules.listed("_change_data/cdc-1.parquet", NOW)


def test_candidates_are_unique() -> None:
    """A path removed twice (once per DV) is one candidate, and so is a shared DV file."""
    rules = _rules(
        [], [_gone("a.parquet", at=0), _gone("a.parquet", at=1, dv=DV), _gone("b", at=2, dv=DV)]
    )
    assert rules.lite_candidates() == ["a.parquet", DV_KEY, "b"]


def test_reclaimable_counts_each_expired_data_file_once_by_its_tombstones_size() -> None:
    """What a vacuum would free: expired tombstones' data files, once each, at the size the
    first tombstone records (0 without one; one without a timestamp has expired); not a live
    file, a tombstone inside the window, a path outside the table, a hidden file, nor a DV
    file (its size is not in the log)."""
    unsized = RemoveFile(path="c.parquet", deletion_timestamp=None, size=None)
    rules = _rules(
        [AddFile(path="live.parquet", size=1)],
        [
            _gone("a.parquet", at=0, size=1),
            _gone("a.parquet", at=1, dv=DV, size=2),
            _gone("live.parquet", at=0, size=4),
            _gone("young.parquet", at=NOW, size=8),
            _gone("s3://other/b.parquet", at=0, size=16),
            _gone("_rlcd/hidden.parquet", at=0, size=32),
            unsized,
        ],
        retention=HOUR,
    )
    assert rules.reclaimable_bytes() == 1


def _p_dv(path: str) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor(
        storage_type="p", path_or_inline_dv=path, size_in_bytes=40, cardinality=1, offset=1
    )


@pytest.mark.parametrize(
    "path",
    [
        "a.parquet",
        "x=1/y=2/part-0.parquet",
        "x=a%20b/p.parquet",
        "x=a+b/p.parquet",
        "x=é/p.parquet",
        "x=a:b/p.parquet",
        f"{ROOT}/a.parquet",
        "s3a://bucket/t/a.parquet",
        "s3://other/a.parquet",
        "/abs/a.parquet",
        "file:/abs/a.parquet",
        "",
        "a//b.parquet",
        "a/",
        "./a.parquet",
        "a/./b",
        "a/../b",
        "..",
        "a/..b",
        ".hidden/a..b",
        "x/%2E%2E/c.parquet",
    ],
)
def test_a_column_of_paths_gets_the_keys_path_by_path_rules_give(path: str) -> None:
    """The column form of the key rule (plain paths as they are, the rest in Python) gives
    what the rule gives each path: its key, or null where it names none."""
    expected = _key(ROOT, path)
    got = _keys(ROOT, pa.array(["a.parquet", path, None], pa.string())).to_pylist()
    assert got == ["a.parquet", expected if isinstance(expected, str) else None, None]


def test_url_encoded_paths_are_judged_by_their_keys() -> None:
    """The log's paths are URIs: a tombstone naming a live file in another spelling (decoded,
    or absolute) is no candidate, and a candidate's key is decoded (once: ``%2520`` is
    ``%20``)."""
    rules = _rules(
        [AddFile(path="x=a%20b/live.parquet", size=1)],
        [
            _gone("x=a b/live.parquet", at=0),
            _gone(f"{ROOT}/x=a%20b/live.parquet", at=0),
            _gone("x=a%20b/old.parquet", at=0),
            _gone("x=a%2520b/twice.parquet", at=0),
            _gone("s3a://bucket/t/x=%C3%A9/hadoop.parquet", at=0),
        ],
    )
    assert rules.lite_candidates() == [
        "x=a b/old.parquet",
        "x=a%20b/twice.parquet",
        "x=é/hadoop.parquet",
    ]
    assert "x=a b/live.parquet" in rules.valid


def test_a_path_removed_then_added_again_stays() -> None:
    """Replayed commits: a path re-added with the same key drops its tombstone; one re-added
    with another DV keeps the old key's tombstone, whose DV file alone goes."""
    old_dv = DeletionVectorDescriptor.for_file(
        uuid=UUID(int=8), offset=1, size_in_bytes=40, cardinality=1
    )

    def add(path: str, dv: DeletionVectorDescriptor | None = None) -> bytes:
        body = {"path": path, "size": 1, "modificationTime": 0, "dataChange": True}
        return _line("add", body | ({"deletionVector": dv.to_json()} if dv else {}))

    def remove(path: str, dv: DeletionVectorDescriptor | None = None) -> bytes:
        body = {"path": path, "deletionTimestamp": 0, "dataChange": True}
        return _line("remove", body | ({"deletionVector": dv.to_json()} if dv else {}))

    commits = [
        SETUP + add("a.parquet") + add("b.parquet", old_dv),
        remove("a.parquet") + remove("b.parquet", old_dv) + add("b.parquet", DV),
        add("a.parquet"),
    ]
    snapshot = replay(ROOT, [(v, parse_commit(c)) for v, c in enumerate(commits)])
    assert set(snapshot.tombstone_rows["path"].to_pylist()) == {"b.parquet"}
    rules = VacuumRules.of(
        ROOT,
        partition_columns=(),
        files=snapshot.adds,
        tombstones=snapshot.tombstone_rows,
        now_ms=NOW,
        retention_ms=0,
    )
    assert rules.lite_candidates() == [f"deletion_vector_{UUID(int=8)}.bin"]
    assert rules.reclaimable_bytes() == 0
    assert {"a.parquet", "b.parquet", DV_KEY} <= rules.valid


def test_a_dv_file_named_by_an_absolute_path_and_by_a_uuid_is_one_file() -> None:
    """A ``p`` DV and a ``u`` DV may name the same file: whichever is live keeps it."""
    uuid9 = DeletionVectorDescriptor.for_file(
        uuid=UUID(int=9), prefix="cd", offset=1, size_in_bytes=40, cardinality=1
    )
    key9 = f"cd/deletion_vector_{UUID(int=9)}.bin"
    rules = _rules(
        [
            AddFile(path="live1.parquet", size=1, deletion_vector=_p_dv(f"{ROOT}/{DV_KEY}")),
            AddFile(path="live2.parquet", size=1, deletion_vector=uuid9),
        ],
        [
            _gone("gone1.parquet", at=0, dv=DV),
            _gone("gone2.parquet", at=0, dv=_p_dv(f"{ROOT}/{key9}")),
        ],
    )
    assert rules.lite_candidates() == ["gone1.parquet", "gone2.parquet"]
    assert {DV_KEY, key9} <= rules.valid


def test_a_dv_file_outside_the_root_is_reported() -> None:
    """An expired tombstone's ``p`` DV elsewhere is reported, its data file still goes; a
    live one elsewhere is neither kept nor reported."""
    elsewhere = _p_dv("s3://other/dv/deletion_vector_x.bin")
    rules = _rules(
        [AddFile(path="live.parquet", size=1, deletion_vector=_p_dv("s3://other/live.bin"))],
        [_gone("a.parquet", at=0, dv=elsewhere)],
    )
    assert rules.lite_candidates() == ["a.parquet"]
    assert [o.path for o in rules.outside()] == ["s3://other/dv/deletion_vector_x.bin"]
    assert rules.valid == frozenset({"live.parquet"})


def test_a_malformed_dv_descriptor_names_the_table_and_the_file() -> None:
    """A descriptor the log holds but no reader can follow stops the vacuum, naming where."""
    snapshot = _snapshot([], [_gone("a.parquet", at=0, dv=DV)])
    column = snapshot.tombstone_rows.schema.get_field_index("deletion_vector")
    bad = dict(DV.to_json(), pathOrInlineDv="short")
    tombstones = snapshot.tombstone_rows.set_column(
        column, "deletion_vector", pa.array([bad], snapshot.tombstone_rows["deletion_vector"].type)
    )
    rules = VacuumRules.of(
        ROOT,
        partition_columns=(),
        files=snapshot.adds,
        tombstones=tombstones,
        now_ms=NOW,
        retention_ms=0,
    )
    with pytest.raises(CorruptLogError, match=f"table {ROOT}.*file a.parquet"):
        rules.lite_candidates()


def test_replay_keeps_tombstones_until_the_key_is_added_again() -> None:
    """Removes become tombstones keyed by (path, DV id), from checkpoints and commits; an add of
    the same key drops the tombstone; a remove's deletionTimestamp and DV are kept; the paths
    of cdc actions are kept too."""
    checkpoint = parse_commit(
        SETUP + _line("remove", {"path": "old.parquet", "deletionTimestamp": 5})
    )
    c1 = parse_commit(
        _line("add", {"path": "a.parquet", "size": 1, "modificationTime": 0, "dataChange": True})
        + _line("remove", {"path": "b.parquet", "deletionTimestamp": 7})
    )
    c2 = parse_commit(
        _line("remove", {"path": "a.parquet", "deletionTimestamp": 9})
        + _line("add", {"path": "b.parquet", "size": 1, "modificationTime": 0, "dataChange": True})
        + _line("cdc", {"path": "_change_data/c.parquet", "size": 1, "dataChange": False})
    )
    snap = replay("t", [(1, c1), (2, c2)], checkpoint=(0, checkpoint))
    rows = snap.tombstone_rows.to_pylist()
    assert {(r["path"], r["deletion_timestamp"]) for r in rows} == {
        ("old.parquet", 5),
        ("a.parquet", 9),
    }
    assert list(snap.files) == ["b.parquet"]
