"""The compaction policy and the planner: candidates, packing, filters, no re-compaction (§7)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcd.compaction.plan import Bin, plan_bins
from rlcd.compaction.policy import (
    MIB,
    CompactionPolicy,
    effective_policy,
    parse_byte_size,
    parse_duration,
)
from rlcd.delta.actions import AddFile, Metadata, Protocol
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.predicate import Predicate
from rlcd.delta.protocol import TableConfig
from rlcd.delta.replay import Snapshot, replay
from rlcd.delta.schema import ColumnMappingMode, parse_schema
from rlcd.errors import (
    ConfigError,
    CorruptLogError,
    InternalError,
    TableError,
    UnsupportedFeatureError,
)
from rlcd.reconcile.tags import optimized_for

# --- literals ------------------------------------------------------------------------------------

PLAIN = Protocol(min_reader_version=1, min_writer_version=2)
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


def metadata(
    partition_columns: Sequence[str] = ("p",),
    configuration: Mapping[str, str] | None = None,
    schema: str = SCHEMA,
) -> Metadata:
    return Metadata(
        id="t",
        schema_string=schema,
        partition_columns=tuple(partition_columns),
        configuration=dict(configuration or {}),
    )


def add(
    path: str,
    size: int,
    p: str | None = "a",
    *,
    records: int | None = None,
    deleted: int = 0,
    dv_id: str = "x",
    clustered: bool = False,
    values: Mapping[str, str | None] | None = None,
) -> AddFile:
    """A live file; ``records`` is stats.numRecords, ``deleted`` its DV cardinality."""
    dv = None
    if deleted:
        dv = DeletionVectorDescriptor(
            storage_type="i", path_or_inline_dv=dv_id, size_in_bytes=1, cardinality=deleted
        )
    return AddFile(
        path=path,
        partition_values=dict(values) if values is not None else {"p": p},
        size=size,
        stats=json.dumps({"numRecords": records}) if records is not None else None,
        deletion_vector=dv,
        clustering_provider="liquid" if clustered else None,
    )


def table(
    files: Sequence[AddFile], meta: Metadata | None = None, protocol: Protocol = PLAIN
) -> tuple[Snapshot, TableConfig]:
    meta = meta or metadata()
    snapshot = replay("t", [(3, [protocol, meta, *files])])
    return snapshot, TableConfig("t", protocol, meta)


def plan(files: Sequence[AddFile], policy: CompactionPolicy, **kw: object) -> list[Bin]:
    return plan_bins(*table(files, **kw), policy)  # type: ignore[arg-type]


def paths(bins: Sequence[Bin]) -> list[list[str]]:
    return [[s.path for s in b.sources] for b in bins]


P100 = CompactionPolicy(target_file_size=100)  # small files: under 50 bytes


# --- policy --------------------------------------------------------------------------------------


def test_policy_defaults() -> None:
    """128 MiB target, small under half of it, 5% deleted rows, zstd, unlimited bins."""
    policy = CompactionPolicy()
    assert policy.target_file_size == 128 * MIB
    assert policy.small_file_threshold == 64 * MIB
    assert policy.max_deleted_rows_ratio == 0.05
    assert (policy.codec, policy.max_bins, policy.partition_filter) == ("zstd", None, None)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"target_file_size": 0}, "target_file_size must be an integer >= 1"),
        ({"target_file_size": True}, "target_file_size must be an integer >= 1"),
        ({"target_file_size": 1.5}, "target_file_size must be an integer >= 1"),
        ({"min_file_size": -1}, "min_file_size must be an integer >= 0"),
        ({"target_file_size": 100, "min_file_size": 51}, "must be at most half"),
        ({"max_deleted_rows_ratio": -0.1}, "max_deleted_rows_ratio must be a number in"),
        ({"max_deleted_rows_ratio": 1.5}, "max_deleted_rows_ratio must be a number in"),
        ({"max_deleted_rows_ratio": float("nan")}, "max_deleted_rows_ratio"),
        ({"max_deleted_rows_ratio": True}, "max_deleted_rows_ratio"),
        ({"max_bins": 0}, "max_bins must be an integer >= 1"),
        ({"codec": "lz4"}, "codec must be one of gzip, none, snappy, zstd"),
        ({"encodings": "fast"}, "encodings must be one of adaptive, conservative, got 'fast'"),
        ({"row_group_rows": 0}, "row_group_rows must be an integer >= 1"),
        ({"row_group_rows": 64 * 1024 * 1024 + 1}, "row_group_rows must be at most 67108864"),
    ],
)
def test_policy_validation_names_the_field(fields: dict[str, object], message: str) -> None:
    """Each invalid setting is a ConfigError naming the setting."""
    with pytest.raises(ConfigError, match=message):
        CompactionPolicy(**fields)  # type: ignore[arg-type]


def test_explicit_min_file_size_is_kept() -> None:
    """An explicit minimum wins over the derived half, up to exactly half the target."""
    assert CompactionPolicy(target_file_size=100, min_file_size=50).small_file_threshold == 50
    assert CompactionPolicy(target_file_size=100, min_file_size=0).small_file_threshold == 0


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("134217728", 134217728),
        ("128mb", 128 * MIB),
        (" 128MB ", 128 * MIB),
        ("128m", 128 * MIB),
        ("128MiB", 128 * MIB),
        ("1g", 1024 * MIB),
        ("64k", 64 * 1024),
        ("10b", 10),
        ("1t", 1024**4),
    ],
)
def test_byte_sizes(text: str, size: int) -> None:
    """Plain bytes and Spark's binary units, in any case, parse."""
    assert parse_byte_size(text) == size


@pytest.mark.parametrize("text", ["", "mb", "1.5mb", "-1", "+1", "12x", "0", "128 mb", "9" * 20])
def test_bad_byte_sizes(text: str) -> None:
    """Fractions, signs, unknown units, zero and overflow are errors naming the text."""
    with pytest.raises(ValueError, match=r"is not a byte size|out of range"):
        parse_byte_size(text)


def config_with(properties: Mapping[str, str]) -> TableConfig:
    return TableConfig("t", PLAIN, metadata(configuration=properties))


def test_table_target_file_size_overrides_the_target() -> None:
    """delta.targetFileSize sets the target; a derived minimum follows it, an explicit one stays."""
    config = config_with({"delta.targetFileSize": "32mb"})
    derived = effective_policy(CompactionPolicy(), config)
    assert (derived.target_file_size, derived.small_file_threshold) == (32 * MIB, 16 * MIB)
    explicit = effective_policy(CompactionPolicy(min_file_size=MIB), config)
    assert (explicit.target_file_size, explicit.small_file_threshold) == (32 * MIB, MIB)
    assert effective_policy(derived, config) == derived
    assert effective_policy(explicit, config_with({})) is explicit


def test_bad_table_target_file_size_names_the_property() -> None:
    """A property that is not a size is a TableError naming the property and the table."""
    with pytest.raises(TableError, match=r"delta\.targetFileSize: '1\.5gb' is not a byte size"):
        effective_policy(CompactionPolicy(), config_with({"delta.targetFileSize": "1.5gb"}))


def test_table_target_below_twice_explicit_minimum_is_a_config_error() -> None:
    """An explicit minimum over half the table's target is a conflict, named as such."""
    config = config_with({"delta.targetFileSize": "64mb"})
    with pytest.raises(ConfigError, match=r"table t: with its delta\.targetFileSize = '64mb'"):
        effective_policy(CompactionPolicy(min_file_size=40 * MIB), config)


# --- candidates and packing ----------------------------------------------------------------------


def test_small_files_pack_next_fit_in_log_order() -> None:
    """Small files fill a bin up to the target; a lone leftover is not a bin."""
    files = [add(f"f{i}", 30) for i in range(4)] + [add("big", 60)]
    bins = plan(files, P100)
    assert paths(bins) == [["f0", "f1", "f2"]]
    assert bins[0].estimated_bytes == 90
    assert not bins[0].purges_dvs
    assert dict(bins[0].partition_values) == {"p": "a"}


def test_bins_close_when_the_next_file_does_not_fit() -> None:
    """A bin is closed before the file that would take it over the target."""
    files = [add("a", 40), add("b", 40), add("c", 30), add("d", 45), add("e", 1)]
    assert paths(plan(files, P100)) == [["a", "b"], ["c", "d", "e"]]


def optimized(f: AddFile, target: int = 100) -> AddFile:
    """``f`` as an earlier OPTIMIZE's output for ``target`` (its add's tags say so)."""
    return replace(f, tags={"OPTIMIZE_TARGET_SIZE": str(target)})


def test_settled_outputs_alone_are_left_alone() -> None:
    """Small files an OPTIMIZE made for this target (or a bigger one) plan nothing by
    themselves, nor with a single new small file beside them."""
    settled = [optimized(add("o1", 20)), optimized(add("o2", 20), 500), optimized(add("o3", 5))]
    assert plan(settled, P100) == []
    assert plan([*settled, add("new", 3)], P100) == []


def test_settled_outputs_are_folded_in_with_new_small_files() -> None:
    """Once new small files make a bin of their own, the settled files of their partition join
    the packing, in log order; other partitions' settled files do not."""
    files = [
        optimized(add("o1", 20)),
        optimized(add("o2", 20)),
        optimized(add("q", 20, "b")),
        add("n1", 10),
        add("n2", 10),
        optimized(add("q2", 20, "b")),
    ]
    assert paths(plan(files, P100)) == [["o1", "o2", "n1", "n2"]]


def test_outputs_of_a_smaller_target_or_with_dvs_are_ordinary_candidates() -> None:
    """A tag for a smaller target does not settle a file; a DV over the ratio is purged."""
    smaller = [optimized(add("s1", 20), 50), optimized(add("s2", 20), 50)]
    assert paths(plan(smaller, P100)) == [["s1", "s2"]]
    purged = optimized(add("d", 20, records=10, deleted=5))
    assert paths(plan([purged], P100)) == [["d"]]


def test_deleted_fraction_over_the_ratio_purges_even_alone() -> None:
    """A big file over 5% deleted is a one-file bin; at or under 5% it is left alone."""
    files = [
        add("heavy", 80, records=100, deleted=6),
        add("exactly", 80, records=100, deleted=5),
        add("clean", 80, records=100),
    ]
    bins = plan(files, P100)
    assert paths(bins) == [["heavy"]]
    assert bins[0].purges_dvs
    assert bins[0].estimated_bytes == 75  # 80 * 94 / 100, rounded down
    assert not bins[0].needs_footer_counts


def test_a_dv_without_num_records_is_purged_and_flagged() -> None:
    """Spark selects a DV file without numRecords; the bin says to read the footer counts."""
    bins = plan([add("dv", 80, deleted=3)], P100)
    assert paths(bins) == [["dv"]]
    assert bins[0].purges_dvs
    assert bins[0].needs_footer_counts
    assert bins[0].estimated_bytes == 80


def test_small_file_without_stats_needs_footer_counts() -> None:
    """Any source without numRecords makes the capture guard read the footer (design §2)."""
    bins = plan([add("a", 10, records=5), add("b", 10)], P100)
    assert paths(bins) == [["a", "b"]]
    assert bins[0].needs_footer_counts
    assert not bins[0].purges_dvs


def test_live_bytes_decide_the_packing() -> None:
    """Files weigh size * live / physical, so half-deleted files pack twice as densely."""
    files = [add(f"f{i}", 40, records=10, deleted=5, dv_id=f"d{i}") for i in range(5)]
    bins = plan(files, P100)
    assert paths(bins) == [["f0", "f1", "f2", "f3", "f4"]]
    assert bins[0].estimated_bytes == 100


def test_big_purge_candidates_do_not_split_the_small_files() -> None:
    """A purge candidate over target - min is rewritten alone, out of the small-file sequence."""
    files = [add("s1", 20), add("heavy", 95, records=10, deleted=1), add("s2", 20)]
    assert paths(plan(files, P100)) == [["s1", "s2"], ["heavy"]]


def test_clustered_files_are_never_candidates() -> None:
    """Files with a clusteringProvider belong to the clustering implementation (§5.3)."""
    files = [add("c1", 10, clustered=True), add("c2", 10, clustered=True), add("s", 10)]
    files.append(add("c3", 90, records=10, deleted=9, clustered=True))
    assert plan(files, P100) == []


def test_excluded_keys_are_left_out_and_the_rest_is_planned() -> None:
    """Excluded (path, DV id) keys (a daemon's quarantine) are no candidates; their partition's
    other files are packed as if they were not there. A file whose DV changed is another key."""
    dv = add("dv", 20, records=100, deleted=1, dv_id="old")
    files = [add("f0", 30), add("bad", 30), add("f1", 30), dv]
    assert paths(plan_bins(*table(files), P100, exclude={("bad", None)})) == [["f0", "f1", "dv"]]
    renewed = add("dv", 20, records=100, deleted=2, dv_id="new").key
    assert renewed[0] == "dv" and renewed != dv.key
    assert paths(plan_bins(*table(files), P100, exclude={renewed, ("dv", None)})) == [
        ["f0", "bad", "f1"]
    ]
    assert plan_bins(*table(files), P100, exclude={f.key for f in files}) == []


def test_partitions_group_by_exact_raw_values() -> None:
    """'1' and '01', null and '' are different partitions; each bin copies its raw map."""
    files = [
        add("one-a", 10, "1"),
        add("zero-one-a", 10, "01"),
        add("one-b", 10, "1"),
        add("zero-one-b", 10, "01"),
        add("null-a", 10, None),
        add("empty-a", 10, ""),
        add("null-b", 10, None),
        add("empty-b", 10, ""),
    ]
    bins = plan(files, P100)
    assert paths(bins) == [
        ["one-a", "one-b"],
        ["zero-one-a", "zero-one-b"],
        ["null-a", "null-b"],
        ["empty-a", "empty-b"],
    ]
    assert [dict(b.partition_values) for b in bins] == [
        {"p": "1"},
        {"p": "01"},
        {"p": None},
        {"p": ""},
    ]


def test_partition_maps_equal_up_to_key_order_group_together() -> None:
    """The raw map is compared as a map: JSON key order is not part of the value."""
    meta = metadata(("p", "q"))
    files = [add("a", 10, values={"p": "1", "q": "2"}), add("b", 10, values={"q": "2", "p": "1"})]
    assert paths(plan(files, P100, meta=meta)) == [["a", "b"]]


def test_bins_come_out_oldest_first_and_max_bins_keeps_the_oldest() -> None:
    """Bins are ordered by their first source's log position; max_bins cuts the newest."""
    files = [
        add("b1", 10, "b"),
        add("a1", 10, "a"),
        add("a2", 10, "a"),
        add("b2", 10, "b"),
        add("c1", 10, "c"),
        add("c2", 10, "c"),
    ]
    assert paths(plan(files, P100)) == [["b1", "b2"], ["a1", "a2"], ["c1", "c2"]]
    assert paths(plan(files, replace(P100, max_bins=2))) == [["b1", "b2"], ["a1", "a2"]]


def test_partition_filter_selects_files() -> None:
    """Only files whose partition values pass the filter are candidates."""
    files = [add(f"{p}{i}", 10, p) for p in ("a", "b", "c") for i in range(2)]
    files += [add("n1", 10, None), add("n2", 10, "")]
    policy = replace(P100, partition_filter=Predicate.parse("p IN ('a', 'c')"))
    assert paths(plan(files, policy)) == [["a0", "a1"], ["c0", "c1"]]
    nulls = replace(P100, partition_filter=Predicate.parse("P is null"))
    assert paths(plan(files, nulls)) == []  # null and '' are different raw partitions


def test_partition_filter_uses_physical_names_under_column_mapping() -> None:
    """With column mapping the filter's logical name finds the physical partitionValues key."""
    schema = json.dumps(
        {
            "type": "struct",
            "fields": [
                {
                    "name": "Region",
                    "type": "string",
                    "nullable": True,
                    "metadata": {
                        "delta.columnMapping.id": 1,
                        "delta.columnMapping.physicalName": "col-5f2e",
                    },
                }
            ],
        }
    )
    meta = metadata(("Region",), {"delta.columnMapping.mode": "name"}, schema)
    protocol = Protocol(min_reader_version=2, min_writer_version=5)
    files = [add(f"{v}{i}", 10, values={"col-5f2e": v}) for v in ("eu", "us") for i in range(2)]
    policy = replace(P100, partition_filter=Predicate.parse("region = 'eu'"))
    assert paths(plan(files, policy, meta=meta, protocol=protocol)) == [["eu0", "eu1"]]
    broken = metadata(("Region",), {"delta.columnMapping.mode": "name"}, SCHEMA)
    with pytest.raises(CorruptLogError, match="cannot map partition columns"):
        plan(files, policy, meta=broken, protocol=protocol)


def test_filter_on_a_non_partition_column_names_the_table() -> None:
    """A filter column the table does not partition by is a ConfigError naming the table."""
    policy = replace(P100, partition_filter=Predicate.parse("id = 1"))
    with pytest.raises(
        ConfigError,
        match=r"table t: predicate 'id = 1': 'id' is not a partition column "
        r"\(partition columns: p\)",
    ):
        plan([add("a", 10)], policy)


INT_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "n", "type": "integer", "nullable": True, "metadata": {}},
        ],
    }
)


def test_partition_filter_compares_by_the_column_type() -> None:
    """On an integer partition column n = 1.0 selects the raw values "1" and "01" (each its
    own bin, since outputs copy the raw map) and nothing else."""
    meta = metadata(("n",), schema=INT_SCHEMA)
    files = [
        add(f"{raw}-{i}", 10, values={"n": raw}) for raw in ("1", "01", "2", None) for i in range(2)
    ]
    policy = replace(P100, partition_filter=Predicate.parse("n = 1.0"))
    assert paths(plan(files, policy, meta=meta)) == [["1-0", "1-1"], ["01-0", "01-1"]]


def test_a_partition_value_not_of_its_type_is_a_corrupt_log() -> None:
    """A raw partition value the column's type cannot read stops planning, naming the file."""
    meta = metadata(("n",), schema=INT_SCHEMA)
    files = [add("good", 10, values={"n": "1"}), add("bad", 10, values={"n": "one"})]
    policy = replace(P100, partition_filter=Predicate.parse("n = 1"))
    with pytest.raises(CorruptLogError, match=r"'one' is not a valid integer.*file bad"):
        plan(files, policy, meta=meta)


def test_table_target_file_size_applies() -> None:
    """The table's delta.targetFileSize packs the bins (and moves the small-file threshold)."""
    meta = metadata(configuration={"delta.targetFileSize": "60"})
    files = [add(f"f{i}", 20) for i in range(4)]
    assert paths(plan(files, P100, meta=meta)) == [["f0", "f1", "f2"]]


def test_tables_rlcd_cannot_write_are_refused() -> None:
    """Planning goes through the protocol gate, which names the features."""
    protocol = Protocol(min_reader_version=1, min_writer_version=7, writer_features=("clustering",))
    with pytest.raises(UnsupportedFeatureError, match="clustering"):
        plan([add("a", 10), add("b", 10)], P100, protocol=protocol)


def test_config_of_another_snapshot_is_a_bug() -> None:
    """Planning with a TableConfig that is not the snapshot's is an InternalError."""
    snapshot, _ = table([add("a", 10)])
    with pytest.raises(InternalError, match="does not match snapshot version 3"):
        plan_bins(snapshot, config_with({"x": "y"}), P100)


def test_bin_ids_are_stable_and_keyed_by_path_and_dv() -> None:
    """The id depends only on the sources' (path, DV id) keys, in order."""
    first = plan([add("a", 10), add("b", 10, records=9, deleted=1, dv_id="d1")], P100)[0]
    again = plan([add("a", 10), add("b", 10, records=9, deleted=1, dv_id="d1")], P100)[0]
    other_dv = plan([add("a", 10), add("b", 10, records=9, deleted=1, dv_id="d2")], P100)[0]
    assert first.bin_id == again.bin_id
    assert first.bin_id != other_dv.bin_id
    assert len(first.bin_id) == 16
    assert int(first.bin_id, 16) >= 0


def test_planned_bin_ids_match_their_sources_across_key_windows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A planned bin's id, made from its rows a window at a time, is the id of a bin of its
    source objects, whether the first id asked for is the first bin's or another's."""
    monkeypatch.setattr("rlcd.compaction.plan._KEY_WINDOW", 3)
    files = [add(f"f{i}", 30, records=9, deleted=i % 3, dv_id=f"d{i}") for i in range(20)]
    for first in (0, -1):
        bins = plan(files, P100)
        assert len(bins) > 3
        asked = bins[first].bin_id
        planned = [b.bin_id for b in bins]  # before the sources: from the rows
        expected = [
            Bin(b.partition_values, b.sources, b.estimated_bytes, b.purges_dvs, False).bin_id
            for b in bins
        ]
        assert planned == expected
        assert asked == expected[first]


def test_bin_checks_its_invariants() -> None:
    """A bin is one partition, distinct sources, two or more unless it purges a DV."""
    a, b = add("a", 10), add("b", 10, "other")
    with pytest.raises(InternalError, match="at least one source"):
        Bin({}, (), 0, purges_dvs=True, needs_footer_counts=False)
    with pytest.raises(InternalError, match="must purge"):
        Bin({"p": "a"}, (a,), 10, purges_dvs=False, needs_footer_counts=True)
    with pytest.raises(InternalError, match="twice"):
        Bin({"p": "a"}, (a, a), 20, purges_dvs=False, needs_footer_counts=True)
    with pytest.raises(InternalError, match="mixes raw partition values"):
        Bin({"p": "a"}, (a, b), 20, purges_dvs=False, needs_footer_counts=True)


# --- properties ----------------------------------------------------------------------------------


_FILE = st.tuples(
    st.integers(0, 250),  # size
    st.sampled_from(["a", "b", "1", "01", None, ""]),  # raw partition value
    st.none() | st.integers(0, 40),  # stats numRecords
    st.integers(0, 40),  # DV cardinality, scaled into [0, numRecords] ([0, 5] without stats)
    st.integers(0, 9),  # clustered when 0
)
"""One file's fields. Built once: strategies made inside the draw would be validated again
for every file of every example (most of these properties' time)."""


def _files(fields: list[tuple[int, str | None, int | None, int, int]]) -> list[AddFile]:
    return [
        add(
            f"f{i}",
            size,
            p,
            records=records,
            deleted=deleted * records // 40 if records is not None else deleted % 6,
            dv_id=f"dv{i}",
            clustered=clustered == 0,
        )
        for i, (size, p, records, deleted, clustered) in enumerate(fields)
    ]


def files_strategy() -> st.SearchStrategy[list[AddFile]]:
    """Random files over a few raw partition values, with and without stats and DVs."""
    return st.lists(_FILE, max_size=25).map(_files)


FILTERS = (None, Predicate.parse("p IN ('a', '01')"), Predicate.parse("p IS NOT NULL"))


_POLICY = st.tuples(
    st.integers(1, 300),  # target
    st.none() | st.integers(0, 150),  # min size, at most half the target
    st.sampled_from([0.0, 0.05, 0.3, 1.0]),
    st.sampled_from(FILTERS),
)


def _policy(fields: tuple[int, int | None, float, Predicate | None]) -> CompactionPolicy:
    target, min_size, ratio, where = fields
    return CompactionPolicy(
        target_file_size=target,
        min_file_size=None if min_size is None else min(min_size, target // 2),
        max_deleted_rows_ratio=ratio,
        partition_filter=where,
    )


def policies() -> st.SearchStrategy[CompactionPolicy]:
    return _POLICY.map(_policy)


def is_purge_candidate(f: AddFile, policy: CompactionPolicy) -> bool:
    if not f.deleted_rows:
        return False
    if not f.num_records:
        return True
    return f.deleted_rows / f.num_records > policy.max_deleted_rows_ratio


def compact(
    files: Sequence[AddFile],
    bins: Sequence[Bin],
    run: int,
    *,
    shrink: float = 1.0,
    target: int | None = None,
) -> list[AddFile]:
    """Simulate the compaction: each bin's sources become one DV-free file of its live bytes
    times ``shrink`` (the output compresses better), tagged with ``target`` when given."""
    removed = {s.path for b in bins for s in b.sources}
    outputs = [
        AddFile(
            path=f"out{run}-{i}",
            partition_values=dict(b.partition_values),
            size=max(1, int(b.estimated_bytes * shrink)),
            stats=json.dumps({"numRecords": b.estimated_bytes}),
            tags={"OPTIMIZE_TARGET_SIZE": str(target)} if target is not None else None,
        )
        for i, b in enumerate(bins)
    ]
    return [f for f in files if f.path not in removed] + outputs


@settings(max_examples=300)
@given(files_strategy(), policies())
def test_bins_are_well_formed(files: list[AddFile], policy: CompactionPolicy) -> None:
    """Bins stay in one raw partition and in log order, within target when they hold several
    files, never touch clustered or filtered-out files, cover every purge candidate, and leave
    at most one small file behind per partition."""
    check_well_formed(files, policy, plan(files, policy))


def check_well_formed(files: list[AddFile], policy: CompactionPolicy, bins: list[Bin]) -> None:
    """The rules of :func:`test_bins_are_well_formed`."""
    position = {f.path: i for i, f in enumerate(files)}
    seen: set[str] = set()
    matches = None
    if policy.partition_filter is not None:
        bound = policy.partition_filter.bind(
            parse_schema(SCHEMA), partition_columns=["p"], mode=ColumnMappingMode.NONE
        )
        matches = bound.matches_partition
    for b in bins:
        assert all(s.partition_values == b.partition_values for s in b.sources)
        order = [position[s.path] for s in b.sources]
        assert order == sorted(order)
        assert len(b.sources) >= 2 or b.purges_dvs
        if len(b.sources) >= 2:
            assert b.estimated_bytes <= policy.target_file_size
        for s in b.sources:
            assert s.path not in seen
            seen.add(s.path)
            assert s.clustering_provider is None
            assert matches is None or matches(s.partition_values)
            assert s.size < policy.small_file_threshold or is_purge_candidate(s, policy)
    assert [position[b.sources[0].path] for b in bins] == sorted(
        position[b.sources[0].path] for b in bins
    )
    left_small: dict[tuple[tuple[str, str | None], ...], int] = {}
    for f in files:
        eligible = f.clustering_provider is None and (
            matches is None or matches(f.partition_values)
        )
        if eligible and is_purge_candidate(f, policy):
            assert f.path in seen
        if eligible and f.size < policy.small_file_threshold and f.path not in seen:
            key = tuple(sorted(f.partition_values.items(), key=lambda kv: kv[0]))
            left_small[key] = left_small.get(key, 0) + 1
    assert all(n <= 1 for n in left_small.values()), "small files left behind"


@settings(max_examples=500)
@given(files_strategy(), policies())
def test_a_second_run_plans_nothing(files: list[AddFile], policy: CompactionPolicy) -> None:
    """Right after a compaction the planner finds nothing to do: no re-compaction loop."""
    bins = plan(files, policy)
    assert plan(compact(files, bins, 1), policy) == []


@settings(max_examples=500)
@given(files_strategy(), policies(), st.floats(0.01, 1.0))
def test_a_second_run_plans_nothing_whatever_the_outputs_compress_to(
    files: list[AddFile], policy: CompactionPolicy, shrink: float
) -> None:
    """Outputs tagged with the target plan nothing right after, even when they came out far
    smaller than estimated (snappy sources rewritten as zstd)."""
    bins = plan(files, policy)
    after = compact(files, bins, 1, shrink=shrink, target=policy.target_file_size)
    assert plan(after, policy) == []


def test_each_layout_is_packed_apart_first() -> None:
    """Files whose row groups copy under different output schemas (layouts) make bins of
    their own layout, in log order; what no bin of its layout took is packed with the
    partition's others."""
    files = [add(f"f{i}", 30) for i in range(7)] + [add("g", 30, "b"), add("h", 30, "b")]
    layouts = {"f1": 1, "f3": 1, "f5": 1, "h": 2}
    bins = plan_bins(*table(files), CompactionPolicy(target_file_size=70), layouts=layouts)
    assert paths(bins) == [["f0", "f2"], ["f1", "f3"], ["f4", "f6"], ["g", "h"]]
    # without layouts: next-fit in log order, layouts mixed
    assert paths(plan(files, CompactionPolicy(target_file_size=70))) == [
        ["f0", "f1"],
        ["f2", "f3"],
        ["f4", "f5"],
        ["g", "h"],
    ]


def test_layouts_of_zero_plan_as_none() -> None:
    files = [add(f"f{i}", 30) for i in range(5)]
    policy = CompactionPolicy(target_file_size=70)
    assert paths(plan_bins(*table(files), policy, layouts={"f1": 0, "f9": 1})) == paths(
        plan(files, policy)
    )


_LAYOUTS = st.lists(st.integers(0, 2), min_size=25, max_size=25)


@settings(max_examples=300)
@given(files_strategy(), policies(), _LAYOUTS)
def test_bins_by_layout_are_well_formed_and_leave_one_small_file(
    files: list[AddFile], policy: CompactionPolicy, kinds: list[int]
) -> None:
    """With layouts the bins keep every rule of :func:`test_bins_are_well_formed` (one
    partition, log order, within target, each file once, every purge candidate, at most one
    small file left per partition)."""
    layouts = {f.path: k for f, k in zip(files, kinds, strict=False)}
    check_well_formed(files, policy, plan_bins(*table(files), policy, layouts=layouts))


@settings(max_examples=300)
@given(files_strategy(), policies(), _LAYOUTS, st.floats(0.01, 1.0))
def test_a_second_run_by_layout_plans_nothing(
    files: list[AddFile], policy: CompactionPolicy, kinds: list[int], shrink: float
) -> None:
    """Right after a compaction by layout (outputs tagged with the target, of their first
    source's layout) the planner finds nothing to do, with layouts or without."""
    layouts = {f.path: k for f, k in zip(files, kinds, strict=False)}
    bins = plan_bins(*table(files), policy, layouts=layouts)
    after = compact(files, bins, 1, shrink=shrink, target=policy.target_file_size)
    outputs = {f"out1-{i}": layouts[b.sources[0].path] for i, b in enumerate(bins)}
    assert plan_bins(*table(after), policy, layouts={**layouts, **outputs}) == []
    assert plan(after, policy) == []


@settings(max_examples=200)
@given(files_strategy(), policies(), st.integers(1, 3))
def test_max_bins_runs_the_same_plan_in_slices(
    files: list[AddFile], policy: CompactionPolicy, max_bins: int
) -> None:
    """Repeated runs under max_bins compact exactly the unlimited plan's bins, oldest first."""
    expected = paths(plan(files, policy))
    done: list[list[str]] = []
    limited = replace(policy, max_bins=max_bins)
    for run in range(len(expected) + 1):
        bins = plan(files, limited)
        if not bins:
            break
        assert len(bins) <= max_bins
        done += paths(bins)
        files = compact(files, bins, run)
    assert done == expected
    assert plan(files, limited) == []


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90", 90.0),
        ("250ms", 0.25),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1.5h", 5400.0),
        (" 7D ", 604800.0),
    ],
)
def test_durations_read_seconds_or_a_unit(text: str, seconds: float) -> None:
    """Durations are seconds, or a number with ms/s/m/h/d, case-insensitive and trimmed."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-5m", "5 minutes", "m", "1h30m", "1e3"])
def test_bad_durations_are_refused(text: str) -> None:
    """Negative, unit-less words, compound and exponent forms are not durations."""
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


# --- the columns against the objects ---------------------------------------------------------

_VALUES = st.sampled_from([{"p": "a"}, {"p": "01"}, {"p": "1"}, {"p": None}, {"p": ""}, {}])
_TAGS = st.sampled_from(
    [
        None,
        {},
        {"k": "v"},
        {"OPTIMIZE_TARGET_SIZE": "100"},
        {"OPTIMIZE_TARGET_SIZE": "10"},
        {"k": None, "OPTIMIZE_TARGET_SIZE": "300"},
        {"OPTIMIZE_TARGET_SIZE": " 9x"},
    ]
)
_STATS = st.sampled_from(
    ['{"numRecords":N}', '{"numRecords":N,"minValues":{}}', '{ "numRecords": N }', "{}", "junk"]
)
_VARIED = st.tuples(
    st.sampled_from([0, 1, 4, 5, 10, 20, 25, 30, 50, 60, 99, 100, 120]),  # size
    _VALUES,
    st.booleans(),  # a second partition column, before or after p
    st.none() | _STATS,
    st.integers(0, 40),  # records
    st.integers(0, 12),  # DV cardinality (none when 0)
    _TAGS,
    st.integers(0, 9),  # modification time; clustered when 9
)


_Varied = tuple[int, dict[str, str | None], bool, str | None, int, int, dict[str, Any] | None, int]


def _varied(fields: list[_Varied]) -> list[AddFile]:
    files = []
    for i, (size, values, second_first, stats, records, deleted, tags, time) in enumerate(fields):
        raw = dict(values)
        if "p" in raw:  # the same map in either entry order: one partition
            raw = {"q": "x", **raw} if second_first else {**raw, "q": "x"}
        dv = DeletionVectorDescriptor("i", f"dv{i % 3}", 1, deleted) if deleted else None
        files.append(
            AddFile(
                path=f"p/f{i % 20}" if i % 7 else f"f{i}",  # some paths added again
                partition_values=raw,
                size=size,
                modification_time=time,
                stats=None if stats is None else stats.replace("N", str(records)),
                tags=tags,
                deletion_vector=dv,
                clustering_provider="liquid" if time == 9 else None,
            )
        )
    return files


def _object_plan(
    snapshot: Snapshot,
    policy: CompactionPolicy,
    exclude: set[tuple[str, str | None]],
    before_ms: int | None,
    layouts: Mapping[str, int] | None = None,
) -> list[tuple[object, ...]]:
    """The planner's rules (module header, *Layouts* too) over the snapshot's files as
    objects."""
    layouts = layouts or {}
    matches = None
    if policy.partition_filter is not None:
        bound = policy.partition_filter.bind(
            parse_schema(SCHEMA), partition_columns=["p"], mode=ColumnMappingMode.NONE
        )
        matches = bound.matches_partition
    target, small = policy.target_file_size, policy.small_file_threshold
    groups: dict[object, list[tuple[int, int, bool, bool, AddFile]]] = {}
    for position, f in enumerate(snapshot.files.values()):
        if f.clustering_provider is not None or f.key in exclude:
            continue
        if before_ms is not None and f.modification_time >= before_ms:
            continue
        if matches is not None and not matches(f.partition_values):
            continue
        physical, deleted = f.num_records, f.deleted_rows
        if not physical:
            live, purge = f.size, deleted > 0
        else:
            live = f.size * max(physical - deleted, 0) // physical
            purge = deleted / physical > policy.max_deleted_rows_ratio
        if not purge and f.size >= small:
            continue
        made_for = optimized_for(f.tags)
        settled = not purge and made_for is not None and made_for >= target
        key = tuple(sorted(f.partition_values.items()))
        groups.setdefault(key, []).append((position, live, purge, settled, f))

    def next_fit(candidates: list[tuple[int, int, bool, bool, AddFile]]) -> list[list[Any]]:
        out: list[list[Any]] = []
        current: list[Any] = []
        for c in candidates:
            if c[1] > target - small:
                out.append([c])
                continue
            if current and sum(x[1] for x in current) + c[1] > target:
                out.append(current)
                current = []
            current.append(c)
        out = [*out, current] if current else out
        return [g for g in out if len(g) >= 2 or any(x[2] for x in g)]

    def kept(candidates: list[tuple[int, int, bool, bool, AddFile]]) -> list[list[Any]]:
        return next_fit(candidates) if next_fit([c for c in candidates if not c[3]]) else []

    def layout(c: tuple[int, int, bool, bool, AddFile]) -> int:
        return layouts.get(c[4].path, 0)

    # with a layout other than 0 among the candidates, each partition is packed in two passes
    by_layout = any(layout(c) for candidates in groups.values() for c in candidates)
    packed = []
    for candidates in groups.values():
        if not by_layout:
            packed += kept(candidates)
            continue
        kinds = sorted({layout(c) for c in candidates})
        first = [g for k in kinds for g in kept([c for c in candidates if layout(c) == k])]
        taken = {c[0] for g in first for c in g}
        packed += first + kept([c for c in candidates if c[0] not in taken])
    packed.sort(key=lambda g: g[0][0])
    return [
        (
            [c[4] for c in g],
            sum(c[1] for c in g),
            any(c[2] for c in g),
            not all(c[4].num_records is not None for c in g),
        )
        for g in packed[: policy.max_bins]
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_VARIED, max_size=30).map(_varied),
    st.tuples(
        st.sampled_from([10, 50, 60, 100, 300]),
        st.sampled_from([None, 5, 20, 30]),
        st.sampled_from([0.0, 0.05, 0.3, 1.0]),
        st.sampled_from(FILTERS),
    ).map(_policy),
    st.none() | st.integers(1, 3),
    st.none() | st.integers(0, 9),
    st.sets(st.integers(0, 29), max_size=4),
    st.none() | st.lists(st.integers(0, 3), min_size=30, max_size=30),
)
def test_the_column_planner_plans_what_the_object_rules_give(
    files: list[AddFile],
    policy: CompactionPolicy,
    max_bins: int | None,
    before_ms: int | None,
    excluded: set[int],
    kinds: list[int] | None,
) -> None:
    """On varied files (partition maps in either entry order, null and empty values, DVs with
    and without stats, odd stats, OPTIMIZE tags and others, clustering, re-added paths, age,
    excluded keys, layouts or none) the planner's bins are the rules applied to the files as
    objects."""
    policy = replace(policy, max_bins=max_bins)
    snapshot, config = table(files)
    live = list(snapshot.files.values())
    exclude = {live[i].key for i in excluded if i < len(live)} | {("gone", None)}
    layouts = None if kinds is None else {f.path: k for f, k in zip(files, kinds, strict=False)}
    bins = plan_bins(
        snapshot, config, policy, exclude=exclude, before_ms=before_ms, layouts=layouts
    )
    ids = [b.bin_id for b in bins]  # from the columns, before any object is made
    sizes = [(b.num_sources, b.source_bytes, b.largest_source_bytes) for b in bins]
    got = [(list(b.sources), b.estimated_bytes, b.purges_dvs, b.needs_footer_counts) for b in bins]
    assert got == _object_plan(snapshot, policy, exclude, before_ms, layouts)
    assert all(b.partition_values == b.sources[0].partition_values for b in bins)
    assert ids == [Bin(*_fields(b)).bin_id for b in bins]
    assert sizes == [(len(s), sum(f.size for f in s), max(f.size for f in s)) for s, *_ in got]


def _fields(b: Bin) -> tuple[Any, ...]:
    return (b.partition_values, b.sources, b.estimated_bytes, b.purges_dvs, b.needs_footer_counts)


def test_counts_past_int64_and_float_precision_weigh_as_python_integers() -> None:
    """Sizes times live rows past int64, and counts past 2**53 (where a float ratio may round
    otherwise), weigh and purge as the rule in Python's integers says."""
    policy = CompactionPolicy(target_file_size=100, max_deleted_rows_ratio=0.3)
    files = [
        add("a", 2**62, records=2**60, deleted=2**59 - 1, dv_id="d1"),
        add("b", 2**62 + 3, records=2**60 + 1, deleted=2**59 + 1, dv_id="d2"),
        add("c", 3 * 2**61, records=3 * 2**55, deleted=2**55 + 7, dv_id="d3"),
        add("d", 10, records=2**54 + 1, deleted=2**53, dv_id="d4"),
        add("e", 20, records=5),
    ]
    snapshot, config = table(files)
    bins = plan_bins(snapshot, config, policy)
    got = [(list(b.sources), b.estimated_bytes, b.purges_dvs, b.needs_footer_counts) for b in bins]
    assert got == _object_plan(snapshot, policy, set(), None)
    assert {b.sources[0].path for b in bins if b.num_sources == 1} == {"a", "b", "c"}


def test_a_negative_size_is_a_corrupt_log() -> None:
    with pytest.raises(CorruptLogError, match="negative size") as info:
        plan([add("a", 10), add("bad", -1)], P100)
    assert info.value.path == "bad"
