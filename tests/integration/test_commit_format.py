"""What rlcd's OPTIMIZE commit looks like, and that ``verify`` reads tags any engine wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.operations.verify import verify_table
from rlcd.storage import LocalStore
from tests.integration.tables import append, batch, partitioned

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

POLICY = CompactionPolicy(target_file_size=64 * 1024 * 1024)


def _commit(path: Path, version: int) -> list[dict]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


async def _compact(path: Path) -> int:
    async with LocalStore(path) as store:
        report = await compact_table(store, POLICY)
    assert report.committed_version is not None
    return report.committed_version


async def test_optimize_commit_shape(tmp_path: Path) -> None:
    """commitInfo first with Spark's OPTIMIZE fields; adds dataChange=false with stats; every
    remove a Spark-style tombstone with the two composition tags pointing at an add."""
    partitioned(tmp_path)
    version = await _compact(tmp_path)
    actions = _commit(tmp_path, version)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and info["isolationLevel"] == "SnapshotIsolation"
    assert info["readVersion"] == version - 1 and info["isBlindAppend"] is False
    assert info["engineInfo"].startswith("rlcd/") and info["txnId"]
    assert info["operationParameters"]["auto"] is False
    assert info["operationMetrics"]["numRemovedFiles"] == "8"
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == 2 and len(removes) == 8
    for add in adds:
        assert add["dataChange"] is False and json.loads(add["stats"])["numRecords"] == 200
        assert add["path"].startswith(f"part={add['partitionValues']['part']}/part-00000-")
        assert add["path"].endswith("-c000.zstd.parquet")
        assert int(add["tags"]["OPTIMIZE_TARGET_SIZE"]) > 0  # as Spark tags OPTIMIZE outputs
    paths = {a["path"] for a in adds}
    for rm in removes:
        assert rm["dataChange"] is False and rm["extendedFileMetadata"] is True
        assert json.loads(rm["tags"]["compactedInto"])[0] in paths
        info = json.loads(rm["tags"]["compactionInfo"])
        assert info == [
            {"rowOffsetInTarget": info[0]["rowOffsetInTarget"], "sourceNumPhysicalRecords": 50}
        ]


def _enable_in_commit_timestamps(path: Path) -> int:
    """Commit version 8 enabling ICT with a timestamp later than any clock; returns it."""
    future = 4_102_444_800_000  # 2100-01-01
    enabling = [
        {"commitInfo": {"timestamp": future, "inCommitTimestamp": future, "operation": "SET"}},
        {
            "protocol": {
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "writerFeatures": ["inCommitTimestamp", "appendOnly", "invariants"],
            }
        },
    ]
    meta = next(a for a in _commit(path, 0) if "metaData" in a)
    meta["metaData"]["configuration"] = {"delta.enableInCommitTimestamps": "true"}
    enabling.append(meta)
    (path / "_delta_log" / f"{8:020d}.json").write_text(
        "".join(json.dumps(a) + "\n" for a in enabling)
    )
    return future


async def test_in_commit_timestamps_are_kept_monotonic(tmp_path: Path) -> None:
    """On a table with in-commit timestamps, commitInfo carries max(now, previous + 1)."""
    partitioned(tmp_path)
    future = _enable_in_commit_timestamps(tmp_path)
    version = await _compact(tmp_path)
    info = _commit(tmp_path, version)[0]["commitInfo"]
    assert info["inCommitTimestamp"] == future + 1 == info["timestamp"]


async def test_column_mapping_outputs_keep_physical_names_and_field_ids(
    copy_fixture,
) -> None:
    """Under column mapping (id mode) the output's columns are the physical names with the
    table's field ids, exactly as in the files Spark wrote."""
    path = copy_fixture("table-with-columnmapping-mode-id")
    spark_file = next(p for p in path.rglob("*.parquet") if "_delta_log" not in p.parts)
    spark_schema = pq.read_schema(spark_file)
    version = await _compact(path)
    (add,) = [a["add"] for a in _commit(path, version) if "add" in a]
    ours = pq.read_schema(path / add["path"])

    def ids(schema) -> dict[str, bytes]:
        return {f.name: (f.metadata or {}).get(b"PARQUET:field_id") for f in schema}

    assert ids(ours) == ids(spark_schema)
    assert all(v is not None for v in ids(ours).values())


async def test_verify_reads_databricks_spelled_tags_and_catches_tampering(tmp_path: Path) -> None:
    """Tags re-spelled the way Databricks writes them (other tags beside them, other
    whitespace) verify; a wrong offset is reported with the source and output named."""
    partitioned(tmp_path)
    version = await _compact(tmp_path)
    log = tmp_path / "_delta_log" / f"{version:020d}.json"
    actions = _commit(tmp_path, version)
    for a in actions:
        if "remove" in a:
            tags = a["remove"]["tags"]
            info = json.loads(tags["compactionInfo"])
            tags["compactionInfo"] = json.dumps(info)  # spaces after separators
            tags["INSERTION_TIME"] = "1700000000000000"
    log.write_text("".join(json.dumps(a) + "\n" for a in actions))
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
        assert report.ok and report.commits[0].sources_checked == 8
        # now move one source's run: the data no longer matches what the tags claim
        victim = next(
            a["remove"]
            for a in actions
            if "remove" in a
            and json.loads(a["remove"]["tags"]["compactionInfo"])[0]["rowOffsetInTarget"]
        )
        victim["tags"]["compactionInfo"] = json.dumps(
            [{"rowOffsetInTarget": 1, "sourceNumPhysicalRecords": 50}]
        )
        log.write_text("".join(json.dumps(a) + "\n" for a in actions))
        broken = await verify_table(store)
    assert not broken.ok
    problems = " ".join(broken.commits[0].problems)
    assert victim["path"] in problems


async def test_unproven_composition_commits_untagged_and_says_so(tmp_path: Path) -> None:
    """With the counter off, nothing proves the runs: the bins commit without composition
    tags, a warning names each bin, and verify has nothing to check."""
    from structlog.testing import capture_logs

    partitioned(tmp_path)
    with capture_logs() as logs:
        async with LocalStore(tmp_path) as store:
            report = await compact_table(store, POLICY, count_rows=False)
            verification = await verify_table(store)
    assert report.untagged == 2
    removes = [a["remove"] for a in _commit(tmp_path, report.committed_version) if "remove" in a]
    assert all("compactedInto" not in (r.get("tags") or {}) for r in removes)
    warned = {e["bin"] for e in logs if e["event"] == "bin_committed_untagged"}
    assert warned == {b.bin.bin_id for b in report.committed}
    assert verification.ok and verification.commits == ()


async def test_in_commit_timestamps_after_a_checkpoint(tmp_path: Path) -> None:
    """When a checkpoint covers the latest version, its ICT is still read from the commit."""
    import deltalake

    partitioned(tmp_path)
    future = _enable_in_commit_timestamps(tmp_path)
    deltalake.DeltaTable(str(tmp_path)).create_checkpoint()
    assert (tmp_path / "_delta_log" / f"{8:020d}.checkpoint.parquet").exists()
    version = await _compact(tmp_path)
    assert _commit(tmp_path, version)[0]["commitInfo"]["inCommitTimestamp"] == future + 1


async def test_stale_last_checkpoint_hint_falls_back_to_the_full_log(copy_fixture) -> None:
    """A hint naming a checkpoint that lost a part is ignored: the table loads from commits."""
    from rlcd.delta.load import load_snapshot

    path = copy_fixture("multi-part-checkpoint")
    (path / "_delta_log" / "00000000000000000001.checkpoint.0000000002.0000000002.parquet").unlink()
    async with LocalStore(path) as store:
        snapshot = await load_snapshot(store)
    assert snapshot.version == 1 and len(snapshot.files) == 10


async def test_verify_flags_a_live_output_that_is_missing(tmp_path: Path) -> None:
    """An output the table still needs but storage lost is a problem, not a skip."""
    partitioned(tmp_path)
    version = await _compact(tmp_path)
    output = next(a["add"]["path"] for a in _commit(tmp_path, version) if "add" in a)
    (tmp_path / output).unlink()
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    assert not report.ok
    assert f"output {output} is live in the table but missing" in report.commits[0].problems


async def test_verify_treats_nan_as_equal_to_itself(tmp_path: Path) -> None:
    """Rows holding NaN verify, at any depth: the same NaN in source and output is the same
    row (in a struct, a list and a map too)."""

    nan = float("nan")
    for i in range(3):
        append(
            tmp_path,
            pa.table(
                {
                    "x": [nan, float(i)],
                    "y": pa.array([i, i], pa.int64()),
                    "s": pa.array([{"f": nan}, {"f": 1.0}], pa.struct([("f", pa.float32())])),
                    "l": pa.array([[nan, 2.0], None], pa.list_(pa.float64())),
                    "m": pa.array([[("k", nan)], []], pa.map_(pa.string(), pa.float64())),
                }
            ),
        )
    version = await _compact(tmp_path)
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    assert report.ok, report
    assert report.commits[0].version == version and report.commits[0].sources_checked == 3


async def test_verify_streams_runs_across_output_batches(tmp_path: Path) -> None:
    """Runs that straddle the output's batches verify; one value changed deep in the last
    source (past the output's first batch) is reported for that source alone."""

    for i in range(4):
        append(tmp_path, batch(i * 20_000, 20_000))
    version = await _compact(tmp_path)
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
        assert report.ok and report.commits[0].sources_checked == 4
        last = max(
            (a["remove"] for a in _commit(tmp_path, version) if "remove" in a),
            key=lambda r: json.loads(r["tags"]["compactionInfo"])[0]["rowOffsetInTarget"],
        )
        source = tmp_path / last["path"]
        table = pq.read_table(source)
        ids = table.column("id").to_pylist()
        ids[19_000] = -1  # output row 79_000: in the output's second batch
        pq.write_table(table.set_column(0, "id", pa.array(ids, pa.int64())), source)
        broken = await verify_table(store)
    (problem,) = broken.commits[0].problems
    assert last["path"] in problem and "[60000, 80000)" in problem
