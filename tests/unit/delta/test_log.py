"""Log names, segments, action round trips, replay and the protocol gate: pure, no store."""

from __future__ import annotations

import json

import pytest

from rlcd.delta._segment import build_segment
from rlcd.delta.actions import (
    ActionError,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    UnknownAction,
    parse_action,
    parse_commit,
    serialize_commit,
)
from rlcd.delta.log_path import LogKind, LogPath
from rlcd.delta.protocol import TableConfig
from rlcd.delta.replay import replay
from rlcd.errors import CorruptLogError, UnsupportedFeatureError

PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {
    "metaData": {
        "id": "t",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": '{"type":"struct","fields":[]}',
        "partitionColumns": [],
        "configuration": {},
    }
}


def add(path: str, dv: str | None = None, **kw: object) -> dict[str, object]:
    body: dict[str, object] = {
        "path": path,
        "partitionValues": {},
        "size": 10,
        "modificationTime": 1,
        "dataChange": True,
        **kw,
    }
    if dv is not None:
        body["deletionVector"] = {
            "storageType": "u",
            "pathOrInlineDv": dv,
            "offset": 1,
            "sizeInBytes": 36,
            "cardinality": 2,
        }
    return {"add": body}


def remove(path: str, dv: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {"path": path, "dataChange": True}
    if dv is not None:
        body["deletionVector"] = add(path, dv)["add"]["deletionVector"]  # type: ignore[index]
    return {"remove": body}


def commit(*actions: dict[str, object]) -> bytes:
    return b"".join(json.dumps(a).encode() + b"\n" for a in actions)


DV_A = "vBn[lx{q8@P<9BNH/isA"
DV_B = "IjB3V2d3#qUP%s94R0WF"


def test_log_names_parse_every_kind() -> None:
    """Every versioned log name is recognised, and other names are not."""
    assert LogPath.parse("00000000000000000007.json") == LogPath(
        "00000000000000000007.json", 7, LogKind.COMMIT
    )
    mp = LogPath.parse("00000000000000000001.checkpoint.0000000002.0000000003.parquet")
    assert mp is not None and (mp.kind, mp.part, mp.parts) == (LogKind.MULTIPART_CHECKPOINT, 2, 3)
    v2 = LogPath.parse("00000000000000000002.checkpoint.6374b053-df23.json")
    assert v2 is not None and (v2.kind, v2.fmt) == (LogKind.UUID_CHECKPOINT, "json")
    comp = LogPath.parse("00000000000000000001.00000000000000000004.compacted.json")
    assert comp is not None and comp.end_version == 4
    for other in (
        "_last_checkpoint",
        ".00000000000000000010.checkpoint.parquet.crc",
        "1.json",
        "00000000000000000001.checkpoint.0000000004.0000000003.parquet",
    ):
        assert LogPath.parse(other) is None


def _paths(*names: str) -> list[LogPath]:
    return [p for p in (LogPath.parse(n) for n in names) if p is not None]


def test_segment_uses_newest_complete_checkpoint() -> None:
    """An incomplete multi-part checkpoint is skipped for an older complete one."""
    paths = _paths(
        *(f"{v:020d}.json" for v in range(8)),
        f"{3:020d}.checkpoint.parquet",
        f"{6:020d}.checkpoint.0000000001.0000000002.parquet",
    )
    seg = build_segment(paths, table="t")
    assert seg.version == 7
    assert seg.checkpoint_version == 3
    assert [c.version for c in seg.commits] == [4, 5, 6, 7]
    older = build_segment(paths, table="t", version=2)
    assert older.checkpoint == () and [c.version for c in older.commits] == [0, 1, 2]


def test_segment_refuses_gaps_and_empty_logs() -> None:
    """A missing commit or an empty log is a CorruptLogError naming the version."""
    with pytest.raises(CorruptLogError, match="commit\\(s\\) 2 missing"):
        build_segment(_paths(f"{0:020d}.json", f"{1:020d}.json", f"{3:020d}.json"), table="t")
    with pytest.raises(CorruptLogError, match="no Delta log"):
        build_segment([], table="t")
    with pytest.raises(CorruptLogError, match="does not exist"):
        build_segment(_paths(f"{0:020d}.json"), table="t", version=5)


def test_actions_round_trip_keeps_unknown_fields() -> None:
    """Fields and action types rlcd does not know survive parse then serialise."""
    lines = [
        {"commitInfo": {"timestamp": 5, "operation": "WRITE", "engineInfo": "x", "weird": [1]}},
        add("a.parquet", DV_A, stats='{"numRecords":5}', tags={"k": "v"}, futureField={"x": 1}),
        {"remove": {"path": "b", "dataChange": False, "deletionTimestamp": 3, "newThing": True}},
        {"someFutureAction": {"a": 1}},
    ]
    actions = parse_commit(commit(*lines))
    assert isinstance(actions[1], AddFile) and actions[1].num_records == 5
    assert isinstance(actions[3], UnknownAction)
    again = [json.loads(line) for line in serialize_commit(actions).splitlines()]
    assert again == lines


def test_a_file_keeps_its_row_count_not_its_parsed_stats() -> None:
    """A snapshot holds every live file: the row count is parsed once and kept, the parsed
    stats document (min, max and null count of every column) is not."""
    stats = '{"numRecords":7,"minValues":{"a":1},"maxValues":{"a":9},"nullCount":{"a":0}}'
    (f,) = parse_commit(commit(add("a.parquet", stats=stats)))
    assert isinstance(f, AddFile)
    assert f.num_records == 7 and f.parsed_stats["maxValues"] == {"a": 9}
    assert "num_records" in vars(f) and "parsed_stats" not in vars(f)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"{not json", "line 1"),
        (b'{"add": {"path": "a"}}', "size"),
        (b'{"add": {"path": 3, "size": 1}}', "add.path"),
        (b'{"add": {"path": "a", "size": true}}', "add.size"),
        (b'{"add": {}, "remove": {}}', "exactly one key"),
        (b'{"protocol": {"minReaderVersion": 1}}', "minWriterVersion"),
        (b'{"add": {"path": "a", "size": 1, "tags": {"t": [1]}}}', r"add.tags\['t'\]"),
        (b'{"add": {"path": "a", "size": 1, "partitionValues": {"p": 1}}}', "partitionValues"),
        (b'{"remove": {"path": "a", "partitionValues": {"p": {}}}}', "expected a string"),
    ],
)
def test_malformed_actions_are_refused(line: bytes, message: str) -> None:
    """A malformed line raises ActionError naming what is wrong."""
    with pytest.raises(ActionError, match=message):
        parse_commit(b'{"commitInfo":{}}\n' + line if message != "line 1" else line)


def test_values_of_other_types_take_the_checked_path() -> None:
    """A mapping that is not a dict, or a bool where an int is wanted, is judged as before the
    exact-type shortcut: the mapping is taken, its values still checked; the bool refused.
    Blank lines (any ASCII whitespace) are skipped."""
    from types import MappingProxyType

    parts = MappingProxyType({"p": "1", "q": None})
    f = AddFile.from_json({"path": "a", "size": 1, "partitionValues": parts})
    assert f.partition_values is parts
    with pytest.raises(ActionError, match=r"add.tags\['t'\]"):
        AddFile.from_json({"path": "a", "size": 1, "tags": MappingProxyType({"t": 1})})
    with pytest.raises(ActionError, match=r"remove\.size is a bool"):
        RemoveFile.from_json({"path": "a", "size": False})
    lines = b' \t\r\n{"remove":{"path":"a"}}\r\n\x0b\x0c\n\n'
    assert [a.path for a in parse_commit(lines)] == ["a"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "data",
    [
        b'\xef\xbb\xbf{"remove":{"path":"a"}}\n{"remove":{"path":"b"}}',  # a BOM
        b'  {"remove":{"path":"a"}}  \r\n{"remove":{"path":"b"}}\n',  # spaces around
        b'{"remove":{"path":"a"}}\n\x1c\n',  # a str space that is no bytes space
        b'{"remove":{"path":"a"}} x\n',  # data after the value
        b'{"remove":{"path":"a"}}\n{"remove":{"path":"\xff"}}\n',  # not UTF-8
        b'{"remove":{"path":"a"}}\n{"remove":\n{"path":"b"}}\n',  # a value over two lines
        b'{"remove":{"path":"a"}}{"remove":{"path":"b"}}\n',  # two values on a line
        b'{"remove":{"path":"a\\u0000"}}\n',
    ],
)
def test_a_commit_parses_as_its_lines_do(data: bytes) -> None:
    """Each line is decoded in place when the commit is UTF-8 (the fast path); whatever that
    refuses is read line by line as ``json.loads`` reads bytes: the same actions or the same
    error, naming its line."""
    by_line = []
    try:
        for line in data.split(b"\n"):
            if line and not line.isspace():
                by_line.append(parse_action(json.loads(line)))
    except ValueError:
        with pytest.raises(ActionError, match="line"):
            parse_commit(data)
    else:
        assert parse_commit(data) == by_line
        assert parse_commit(bytearray(data)) == by_line


def test_replay_keys_files_by_path_and_dv() -> None:
    """A DV update (remove old key + add new key) keeps the file; a stale remove does nothing."""
    c0 = parse_commit(commit(PROTOCOL, METADATA, add("a"), add("b")))
    # add-then-remove order inside one commit must not lose the new add
    c1 = parse_commit(commit(add("a", DV_A), remove("a")))
    c2 = parse_commit(commit(remove("a"), remove("b")))  # stale key for a; b removed
    snap = replay("t", [(0, c0), (1, c1), (2, c2)])
    assert list(snap.files) == ["a"]
    assert snap.files["a"].dv_unique_id == f"u{DV_A}@1"
    c3 = parse_commit(commit(remove("a", DV_B)))  # wrong DV: no effect
    assert list(replay("t", [(3, c3)], base=snap).files) == ["a"]
    c4 = parse_commit(commit({"commitInfo": {"inCommitTimestamp": 99}}, remove("a", DV_A)))
    after = replay("t", [(4, c4)], base=snap)
    assert after.files == {} and after.in_commit_timestamp == 99
    assert list(snap.files) == ["a"], "the base snapshot is not modified"


def test_replay_requires_protocol_and_metadata() -> None:
    """A log without protocol or metaData is corrupt."""
    with pytest.raises(CorruptLogError, match="no protocol"):
        replay("t", [(0, parse_commit(commit(METADATA)))])


def _config(reader: int, writer: int, rf=None, wf=None, conf=None) -> TableConfig:
    return TableConfig(
        "t",
        Protocol(reader, writer, rf, wf),
        Metadata(id="x", schema_string="{}", configuration=conf or {}),
    )


def test_protocol_gate_names_unsupported_features() -> None:
    """Unknown reader/writer features and too-new versions are refused by name."""
    _config(1, 2).ensure_writable()
    _config(3, 7, ["deletionVectors"], ["deletionVectors", "appendOnly"]).ensure_writable()
    with pytest.raises(UnsupportedFeatureError, match="reader version 99"):
        _config(99, 7).ensure_readable()
    with pytest.raises(UnsupportedFeatureError, match="blahabl") as info:
        _config(3, 7, ["blahabl"], ["blahabl"]).ensure_readable()
    assert info.value.features == ("blahabl",)
    with pytest.raises(UnsupportedFeatureError, match="rowTracking"):
        _config(1, 7, None, ["rowTracking", "domainMetadata"]).ensure_writable()
    legacy = _config(2, 5, conf={"delta.columnMapping.mode": "name"})
    assert legacy.column_mapping_mode == "name"
    assert "changeDataFeed" in legacy.writer_features


def test_dv_enablement_needs_the_property() -> None:
    """New DVs need both the feature and delta.enableDeletionVectors=true."""
    supported = _config(3, 7, ["deletionVectors"], ["deletionVectors"])
    assert supported.deletion_vectors_supported and not supported.deletion_vectors_enabled
    on = _config(
        3, 7, ["deletionVectors"], ["deletionVectors"], {"delta.enableDeletionVectors": "true"}
    )
    assert on.deletion_vectors_enabled


def test_commit_info_fields_are_typed() -> None:
    """commitInfo exposes the fields rlcd reads, the rest stays in extra."""
    (ci,) = parse_commit(commit({"commitInfo": {"txnId": "x", "operation": "OPTIMIZE"}}))
    assert isinstance(ci, CommitInfo) and ci.txn_id == "x" and ci.operation == "OPTIMIZE"
    assert isinstance(parse_commit(commit(remove("a")))[0], RemoveFile)


def test_checkpoint_stats_parsed_become_exact_json() -> None:
    """A checkpoint with only ``stats_parsed`` (writeStatsAsJson=false) gives stats JSON with
    decimals exact (a float would round 12345678901234567.89 up, above the true minimum) and
    NaN as the string Spark writes; it stays strict JSON."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa

    from rlcd.delta._checkpoint import checkpoint_actions

    bounds = pa.struct(
        [("d", pa.decimal128(20, 2)), ("f", pa.float64()), ("t", pa.timestamp("us", "UTC"))]
    )
    stats = pa.struct([("numRecords", pa.int64()), ("minValues", bounds)])
    columns = [("path", pa.string()), ("size", pa.int64()), ("stats", pa.string())]
    add = pa.struct([*columns, ("stats_parsed", stats)])
    low = Decimal("12345678901234567.89")
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    row = {
        "path": "a.parquet",
        "size": 1,
        "stats": None,
        "stats_parsed": {"numRecords": 2, "minValues": {"d": low, "f": float("nan"), "t": when}},
    }
    (action,) = checkpoint_actions(pa.table({"add": pa.array([row], add)}))

    def refuse(constant: str) -> None:
        raise AssertionError(f"bare {constant} in stats JSON")

    parsed = json.loads(action.stats, parse_float=Decimal, parse_constant=refuse)
    assert parsed == {
        "numRecords": 2,
        "minValues": {"d": low, "f": "NaN", "t": "2026-01-02T03:04:05+00:00"},
    }
