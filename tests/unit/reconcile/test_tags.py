"""Composition tags: Databricks' exact format, strict total parsing, tiling (design §2)."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcd.delta.actions import AddFile, RemoveFile, parse_commit
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.reconcile.tags import (
    COMPACTED_INTO,
    COMPACTION_INFO,
    Composition,
    check_tiling,
    composition_tags,
    optimized_for,
    parse_composition,
)

DBR_OUTPUT = "part-00000-378c491b-e2a3-40c7-b572-f43e95b22ea6.c000.snappy.parquet"
DBR_SOURCES = (
    "part-00000-73f53b39-bbed-4d1f-9cca-ce7d6ea9226e.c000.snappy.parquet",
    "part-00000-1a76f841-9a83-44cf-ad2b-a022d9462f78.c000.snappy.parquet",
)
# The tag values verbatim from Databricks' commit.
DBR_INTO = '["part-00000-378c491b-e2a3-40c7-b572-f43e95b22ea6.c000.snappy.parquet"]'
DBR_INFO = (
    '[{"rowOffsetInTarget":0,"sourceNumPhysicalRecords":1}]',
    '[{"rowOffsetInTarget":1,"sourceNumPhysicalRecords":4}]',
)


def _dbr_remove(path: str, info: str, physical: int, size: int) -> dict[str, object]:
    body: dict[str, object] = {
        "path": path,
        "deletionTimestamp": 1734070088720,
        "dataChange": False,
        "extendedFileMetadata": True,
        "partitionValues": {},
        "size": size,
        "tags": {
            "MAX_INSERTION_TIME": "1734070082000000",
            "INSERTION_TIME": "1734070082000000",
            "compactedInto": DBR_INTO,
            "compactionInfo": info,
            "MIN_INSERTION_TIME": "1734070082000000",
            "OPTIMIZE_TARGET_SIZE": "67108864",
        },
        "stats": f'{{"numRecords":{physical}}}',
    }
    if physical == 4:
        body["deletionVector"] = {
            "storageType": "u",
            "pathOrInlineDv": "xXKMQm7kW?Gxtg1Fc8gx",
            "offset": 1,
            "sizeInBytes": 34,
            "cardinality": 1,
        }
    return {"remove": body}


# Version 3 of delta-rs's fixture cdf-table-with-cdc-and-dvs, abridged: a Databricks Runtime 16.0
# auto OPTIMIZE of two files, the second with a one-row DV (protocol notes §2.12).
DATABRICKS_COMMIT = b"".join(
    json.dumps(action).encode() + b"\n"
    for action in (
        {
            "commitInfo": {
                "operation": "OPTIMIZE",
                "readVersion": 2,
                "isolationLevel": "SnapshotIsolation",
                "engineInfo": "Databricks-Runtime/16.0.x-photon-scala2.12",
            }
        },
        _dbr_remove(DBR_SOURCES[0], DBR_INFO[0], 1, 809),
        _dbr_remove(DBR_SOURCES[1], DBR_INFO[1], 4, 885),
        {
            "add": {
                "path": DBR_OUTPUT,
                "partitionValues": {},
                "size": 908,
                "modificationTime": 1734070090000,
                "dataChange": False,
                "stats": '{"numRecords":4,"tightBounds":true}',
                "tags": {"NUM_AUTO_OPTIMIZES": "1", "OPTIMIZE_TARGET_SIZE": "67108864"},
            }
        },
    )
)

SOURCE = "part-00001-source.parquet"
OUTPUT = "part-00002-output.zstd.parquet"
GOOD_INTO = '["part-00002-output.zstd.parquet"]'
GOOD_INFO = '[{"rowOffsetInTarget":7,"sourceNumPhysicalRecords":10}]'


def dv(cardinality: int) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor(
        storage_type="u",
        path_or_inline_dv="vBn[lx{q8@P<9BNH/isA",
        size_in_bytes=36,
        cardinality=cardinality,
        offset=1,
    )


def tombstone(
    tags: Mapping[str, str | None] | None, *, cardinality: int = 0, path: str = SOURCE
) -> RemoveFile:
    return RemoveFile(
        path=path,
        deletion_timestamp=1,
        data_change=False,
        extended_file_metadata=True,
        partition_values={},
        size=100,
        tags=tags,
        deletion_vector=dv(cardinality) if cardinality else None,
    )


def test_parses_a_databricks_optimize_commit() -> None:
    """Databricks' own tags, next to INSERTION_TIME and friends, parse and tile the output."""
    actions = parse_commit(DATABRICKS_COMMIT)
    adds = [a.path for a in actions if isinstance(a, AddFile)]
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    compositions = [parse_composition(r, adds) for r in removes]
    assert compositions == [
        Composition(DBR_SOURCES[0], DBR_OUTPUT, 0, 1, 0),
        Composition(DBR_SOURCES[1], DBR_OUTPUT, 1, 4, 1),
    ]
    assert [c.live for c in compositions if c is not None] == [1, 3]
    assert check_tiling([c for c in compositions if c is not None], 4) is None


def test_encodes_exactly_what_databricks_writes() -> None:
    """The encoded strings are byte-identical to the tags in Databricks' commit."""
    assert composition_tags(DBR_OUTPUT, 0, 1) == {
        COMPACTED_INTO: DBR_INTO,
        COMPACTION_INFO: DBR_INFO[0],
    }
    assert composition_tags(DBR_OUTPUT, 1, 4) == {
        COMPACTED_INTO: DBR_INTO,
        COMPACTION_INFO: DBR_INFO[1],
    }


def test_encoding_is_compact_json() -> None:
    """No spaces; the path is JSON-escaped but non-ASCII is kept, as Jackson writes it."""
    assert composition_tags(OUTPUT, 7, 10) == {
        COMPACTED_INTO: GOOD_INTO,
        COMPACTION_INFO: GOOD_INFO,
    }
    assert composition_tags('a"\\é', 0, 0)[COMPACTED_INTO] == '["a\\"\\\\é"]'


@pytest.mark.parametrize(
    ("path", "offset", "physical"),
    [("", 0, 0), (OUTPUT, -1, 0), (OUTPUT, 0, -1), (OUTPUT, True, 1), (OUTPUT, 0, 1.0)],
)
def test_encoding_refuses_bad_arguments(path: str, offset: object, physical: object) -> None:
    """An empty path or a count that is not a non-negative int is a caller bug."""
    with pytest.raises(ValueError, match="must be"):
        composition_tags(path, offset, physical)  # type: ignore[arg-type]


def test_parse_accepts_the_canonical_form_and_ignores_other_tags() -> None:
    """Valid tags give the composition; extra tags and extra object members are ignored."""
    info = '[{"rowOffsetInTarget":7,"sourceNumPhysicalRecords":10,"future":{"x":[1]}}]'
    tags = {"INSERTION_TIME": "1", COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: info, "x": None}
    assert parse_composition(tombstone(tags, cardinality=3), {OUTPUT}) == Composition(
        SOURCE, OUTPUT, 7, 10, 3
    )


def test_parse_accepts_whitespace_in_the_json() -> None:
    """Any valid JSON spelling of the same values is the same composition."""
    tags = {
        COMPACTED_INTO: ' [ "part-00002-output.zstd.parquet" ] ',
        COMPACTION_INFO: '[ { "sourceNumPhysicalRecords" : 10 , "rowOffsetInTarget" : 7 } ]',
    }
    assert parse_composition(tombstone(tags), [OUTPUT]) == Composition(SOURCE, OUTPUT, 7, 10, 0)


def _info(offset: str, physical: str) -> str:
    return f'[{{"rowOffsetInTarget":{offset},"sourceNumPhysicalRecords":{physical}}}]'


MALFORMED: dict[str, dict[str, str | None]] = {
    "no compactedInto": {COMPACTION_INFO: GOOD_INFO},
    "no compactionInfo": {COMPACTED_INTO: GOOD_INTO},
    "null compactedInto": {COMPACTED_INTO: None, COMPACTION_INFO: GOOD_INFO},
    "compactedInto not JSON": {COMPACTED_INTO: "[part-2]", COMPACTION_INFO: GOOD_INFO},
    "compactionInfo not JSON": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: "[{rowOffset"},
    "empty text": {COMPACTED_INTO: "", COMPACTION_INFO: GOOD_INFO},
    "bare path": {COMPACTED_INTO: json.dumps(OUTPUT), COMPACTION_INFO: GOOD_INFO},
    "two outputs": {
        COMPACTED_INTO: json.dumps([OUTPUT, "other.parquet"]),
        COMPACTION_INFO: GOOD_INFO,
    },
    "no outputs": {COMPACTED_INTO: "[]", COMPACTION_INFO: GOOD_INFO},
    "output not a string": {COMPACTED_INTO: "[7]", COMPACTION_INFO: GOOD_INFO},
    "two info objects": {
        COMPACTED_INTO: GOOD_INTO,
        COMPACTION_INFO: '[{"rowOffsetInTarget":0,"sourceNumPhysicalRecords":1},'
        '{"rowOffsetInTarget":1,"sourceNumPhysicalRecords":1}]',
    },
    "no info objects": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: "[]"},
    "info not in a list": {
        COMPACTED_INTO: GOOD_INTO,
        COMPACTION_INFO: '{"rowOffsetInTarget":7,"sourceNumPhysicalRecords":10}',
    },
    "info element not an object": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: "[[7,10]]"},
    "negative offset": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("-1", "10")},
    "negative physical": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("0", "-10")},
    "float offset": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("7.0", "10")},
    "exponent physical": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("7", "1e1")},
    "NaN offset": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("NaN", "10")},
    "bool offset": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("true", "10")},
    "bool physical": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("0", "false")},
    "string offset": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info('"7"', "10")},
    "null physical": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("7", "null")},
    "missing offset": {
        COMPACTED_INTO: GOOD_INTO,
        COMPACTION_INFO: '[{"sourceNumPhysicalRecords":10}]',
    },
    "missing physical": {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: '[{"rowOffsetInTarget":7}]'},
    "repeated member": {
        COMPACTED_INTO: GOOD_INTO,
        COMPACTION_INFO: '[{"rowOffsetInTarget":7,"rowOffsetInTarget":8,'
        '"sourceNumPhysicalRecords":10}]',
    },
    "path not in the commit": {
        COMPACTED_INTO: '["part-00003-elsewhere.parquet"]',
        COMPACTION_INFO: GOOD_INFO,
    },
    "path differs in encoding only": {
        COMPACTED_INTO: '["part-00002-output.zstd%2Eparquet"]',
        COMPACTION_INFO: GOOD_INFO,
    },
    "deeply nested": {COMPACTED_INTO: "[" * 100_000 + "]" * 100_000, COMPACTION_INFO: GOOD_INFO},
}


@pytest.mark.parametrize("tags", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_tags_are_no_composition(tags: dict[str, str | None]) -> None:
    """Every deviation from the exact shape yields None, never an exception."""
    assert parse_composition(tombstone(tags, cardinality=3), {OUTPUT}) is None


def test_no_tags_is_no_composition() -> None:
    """An ordinary compaction tombstone (Spark OSS, delta-rs) has no composition."""
    assert parse_composition(tombstone(None), {OUTPUT}) is None
    assert parse_composition(tombstone({"INSERTION_TIME": "1"}), {OUTPUT}) is None


def test_fewer_physical_rows_than_deleted_is_no_composition() -> None:
    """``P < cardinality`` of the tombstone's DV cannot describe a run; ``P == card`` can."""
    tags = {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: _info("7", "10")}
    assert parse_composition(tombstone(tags, cardinality=11), {OUTPUT}) is None
    assert parse_composition(tombstone(tags, cardinality=10), {OUTPUT}) == Composition(
        SOURCE, OUTPUT, 7, 10, 10
    )


def test_a_source_compacted_into_itself_is_no_composition() -> None:
    """A tag naming the tombstone's own path cannot be a compaction (file names are new)."""
    tags = {COMPACTED_INTO: GOOD_INTO, COMPACTION_INFO: GOOD_INFO}
    assert parse_composition(tombstone(tags, path=OUTPUT), {OUTPUT}) is None


def test_fully_deleted_source_is_a_zero_length_run() -> None:
    """A source with L = 0 parses, and its empty run tiles anywhere between the others."""
    tags = composition_tags(OUTPUT, 3, 5)
    zero = parse_composition(tombstone(tags, cardinality=5, path="z.parquet"), {OUTPUT})
    assert zero == Composition("z.parquet", OUTPUT, 3, 5, 5)
    assert zero.live == 0
    first = Composition("a.parquet", OUTPUT, 0, 3, 0)
    last = Composition("b.parquet", OUTPUT, 3, 4, 0)
    assert check_tiling([last, zero, first], 7) is None
    assert check_tiling([Composition("z0", OUTPUT, 0, 2, 2), first, last], 7) is None
    assert check_tiling([first, last, Composition("z7", OUTPUT, 7, 1, 1)], 7) is None
    assert check_tiling([Composition("only", OUTPUT, 0, 9, 9)], 0) is None


def test_tiling_reports_the_first_violation() -> None:
    """Gaps, overlaps, a wrong start, a wrong total, repeats and mixed outputs are named."""

    def run(source: str, offset: int, live: int, output: str = OUTPUT) -> Composition:
        return Composition(source, output, offset, live + 2, 2)

    a, b = run("a", 0, 3), run("b", 3, 4)
    assert check_tiling([a, b], 7) is None
    assert check_tiling([], 0) is None
    assert check_tiling([a, run("b", 4, 4)], 8) == (
        "the run of 'b' starts at row 4, expected 3 (a gap)"
    )
    assert check_tiling([a, run("b", 2, 4)], 6) == (
        "the run of 'b' starts at row 2, expected 3 (an overlap)"
    )
    assert check_tiling([run("a", 1, 3), run("b", 4, 4)], 8) == (
        "the run of 'a' starts at row 1, expected 0 (a gap)"
    )
    assert check_tiling([a, b], 8) == "the runs cover 7 rows but the output has 8"
    assert check_tiling([], 5) == "the runs cover 0 rows but the output has 5"
    assert check_tiling([a, run("a", 3, 0), b], 7) == "source 'a' has two runs"
    assert check_tiling([a, run("b", 3, 4, "other")], 7) == (
        f"the runs name 2 outputs: other, {OUTPUT}"
    )
    with pytest.raises(ValueError, match="output_rows"):
        check_tiling([a], -1)


def test_runs_of_a_partly_tagged_output_may_leave_gaps_but_not_overlap() -> None:
    """Without every source tagged, the rows between runs are the untagged sources': gaps
    and a short cover are fine; overlaps, a run past the output's end and repeats are not."""

    def run(source: str, offset: int, live: int) -> Composition:
        return Composition(source, OUTPUT, offset, live, 0)

    a, b = run("a", 2, 3), run("b", 8, 4)
    assert check_tiling([b, a], 15, complete=False) is None
    assert check_tiling([], 5, complete=False) is None
    assert check_tiling([a, run("z", 5, 0), b], 12, complete=False) is None
    assert check_tiling([a, run("b", 4, 4)], 15, complete=False) == (
        "the run of 'b' starts at row 4, expected at least 5 (an overlap)"
    )
    assert check_tiling([a, b], 11, complete=False) == (
        "the run of 'b' ends at row 12, past the output's 11 rows"
    )
    assert check_tiling([a, run("a", 9, 1)], 15, complete=False) == "source 'a' has two runs"


@pytest.mark.parametrize(
    ("offset", "physical", "cardinality"), [(-1, 1, 0), (0, -1, 0), (0, 1, -1), (0, 1, 2)]
)
def test_composition_checks_its_invariants(offset: int, physical: int, cardinality: int) -> None:
    """Counts are non-negative and a source cannot delete more rows than it has."""
    with pytest.raises(ValueError, match=r"non-negative|deleted"):
        Composition(SOURCE, OUTPUT, offset, physical, cardinality)


_paths = st.text(min_size=1, max_size=40)
_extra_tags = st.dictionaries(
    st.text(max_size=20).filter(lambda k: k not in (COMPACTED_INTO, COMPACTION_INFO)),
    st.none() | st.text(max_size=20),
    max_size=4,
)


@given(
    _paths,
    _paths,
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**40).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, p))),
    _extra_tags,
    st.lists(_paths, max_size=3),
)
def test_round_trip(
    source: str,
    output: str,
    offset: int,
    counts: tuple[int, int],
    extra: dict[str, str | None],
    other_adds: list[str],
) -> None:
    """Encoding then parsing gives back the composition, whatever else the tags hold."""
    physical, cardinality = counts
    tags = {**extra, **composition_tags(output, offset, physical)}
    remove = tombstone(tags, cardinality=cardinality, path=source)
    parsed = parse_composition(remove, [*other_adds, output])
    if source == output:
        assert parsed is None
    else:
        assert parsed == Composition(source, output, offset, physical, cardinality)
        assert parsed.live == physical - cardinality


@given(st.none() | st.text(), st.none() | st.text(), st.integers(0, 3))
def test_parse_is_total(into: str | None, info: str | None, cardinality: int) -> None:
    """Arbitrary tag text never raises; a result always satisfies the invariants."""
    tags = {COMPACTED_INTO: into, COMPACTION_INFO: info}
    parsed = parse_composition(tombstone(tags, cardinality=cardinality), {OUTPUT, into or ""})
    assert parsed is None or parsed.live >= 0


@given(
    st.lists(
        st.integers(0, 2).flatmap(lambda c: st.tuples(st.integers(0, 5), st.just(c))),
        max_size=6,
    ),
    st.randoms(use_true_random=False),
)
def test_runs_written_in_order_always_tile(
    sources: list[tuple[int, int]], rng: random.Random
) -> None:
    """Runs laid out one after another, as the rewrite writes them, tile in any listed order."""
    compositions, offset = [], 0
    for i, (live, cardinality) in enumerate(sources):
        c = Composition(f"s{i}", OUTPUT, offset, live + cardinality, cardinality)
        compositions.append(c)
        offset += c.live
    rng.shuffle(compositions)
    assert check_tiling(compositions, offset) is None


@pytest.mark.parametrize(
    ("tags", "target"),
    [
        ({"OPTIMIZE_TARGET_SIZE": "134217728"}, 134217728),
        ({"OPTIMIZE_TARGET_SIZE": "0"}, None),
        ({"OPTIMIZE_TARGET_SIZE": "-5"}, None),
        ({"OPTIMIZE_TARGET_SIZE": "1.5e8"}, None),
        ({"OPTIMIZE_TARGET_SIZE": "big"}, None),
        ({"OPTIMIZE_TARGET_SIZE": None}, None),
        ({}, None),
        (None, None),
    ],
)
def test_optimized_for_reads_only_a_positive_integer(
    tags: dict[str, str | None] | None, target: int | None
) -> None:
    """The target an output was made for is a positive integer tag, else unknown."""
    assert optimized_for(tags) == target
