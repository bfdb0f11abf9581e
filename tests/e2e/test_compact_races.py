"""``python -m rlcd compact`` losing a real race, on local disk and on moto's S3: its commit put
is held (:mod:`tests.e2e.commit_hold`) until the winner committed.

The report says what became of the bin, with the counts the commit really has: reconciled by
mask (delta-rs's copy-on-write DELETE) or by remap (a DV delete), with the positions; lost to
another compaction of the same files, which is no failure and exits 5 (issue 42).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlcd.delta.actions import CommitInfo, RemoveFile
from tests.e2e.commit_hold import Side, losing_run, sides
from tests.integration.races import ROWS, compact, dv_delete, in_thread, judge, last_commit

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.integration]

ALL = range(4 * ROWS)


@pytest.fixture(params=["local", "s3"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    yield from sides(request, tmp_path)


async def _commit_metrics(side: Side) -> dict[str, str]:
    (info,) = [a for a in await last_commit(side.table) if isinstance(a, CommitInfo)]
    metrics: dict[str, str] = info.extra["operationMetrics"]
    return metrics


async def test_a_reconcile_by_mask_is_reported_with_exact_counts(side: Side) -> None:
    """A compaction that lost to delta-rs's DELETE of one row masks that source's 20 rows:
    the report counts the 3 files the commit removes (not the 4 it read), and says the bin was
    reconciled by mask with its positions."""
    table = side.table

    async def winner() -> None:
        await in_thread(lambda dt: dt.delete(f"id = {ROWS + 5}"), table)

    done = await losing_run(side, ["compact", table.uri], winner)
    assert done.code == 0, done.stderr
    metrics = await _commit_metrics(side)
    assert (metrics["numRemovedFiles"], metrics["numMaskedPositions"]) == ("3", str(ROWS))
    lines = done.stdout.splitlines()
    assert ": committed version 5: 3 files (" in lines[0]
    assert " -> 1 file (" in lines[0]
    assert lines[0].split("; ", 1)[1] == "1 bin: 1 reconciled by mask"
    assert lines[1].endswith(
        ": reconciled by mask: 1 source masked (20 positions): 3 of 4 files -> 1 file"
    )
    assert len(lines) == 2, done.stdout
    await judge(table, set(ALL) - {ROWS + 5})


async def test_a_reconcile_by_remap_is_reported_with_its_positions(side: Side) -> None:
    """A DV delete of two rows of two sources that won is remapped: every source removed."""
    table = side.table
    done = await losing_run(
        side, ["compact", table.uri], lambda: dv_delete(table, {0: [1], 2 * ROWS: [4]})
    )
    assert done.code == 0, done.stderr
    assert ": committed version 5: 4 files (" in done.stdout
    assert "; 1 bin: 1 reconciled by remap\n" in done.stdout
    assert ": reconciled by remap: 2 sources remapped (2 positions): 4 files -> 1 file\n" in (
        done.stdout
    )
    await judge(table, set(ALL) - {1, 2 * ROWS + 4})


async def test_losing_to_another_compaction_is_superseded_not_a_failure(side: Side) -> None:
    """Two compactions of the same files: the one whose commit lost says another compaction
    did its work, commits nothing, leaves nothing of its own, and exits 5, not 1."""
    table = side.table

    async def other_compaction() -> None:
        report = await compact(table, [])
        assert report.committed_version == 4 and not report.failed

    done = await losing_run(side, ["compact", table.uri], other_compaction)
    assert done.code == 5, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].endswith(": nothing committed; 1 bin: 1 superseded"), done.stdout
    superseded = ": superseded (another compaction did its work): source_compacted: version 4"
    assert superseded in lines[1], done.stdout
    assert done.stderr == ""
    removed = [a for a in await last_commit(table) if isinstance(a, RemoveFile)]
    assert len(removed) == 4, "the winner's commit is the last"
    await judge(table, set(ALL))


async def test_superseded_is_logged_for_machines(side: Side) -> None:
    """With --log-format json the loser's abort is one ``bin_aborted`` event with its code."""
    table = side.table
    done = await losing_run(
        side, ["compact", table.uri, "--log-format", "json"], lambda: compact(table, [])
    )
    assert done.code == 5, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["event"], e["reason"]) for e in events if e["event"] == "bin_aborted"] == [
        ("bin_aborted", "source_compacted")
    ]
