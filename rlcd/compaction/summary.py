"""What a compaction run did, bin by bin, in words: one text for the CLI's report, the
daemon's ``/healthz`` (and so ``rlcd status``) and the demos' summaries.

Counts are the commit's own: a source a winner removed before the commit (masked) is not
counted as removed, and an output whose every row was deleted is not counted as added.
"""

from __future__ import annotations

from collections import Counter

from rlcd.compaction.commit import BinAborted, BinCommitted, BinResult
from rlcd.compaction.compact import BinFailure, CompactionReport, FailureKind
from rlcd.compaction.words import count, partition_text
from rlcd.delta.schema import column_mapping_mode, parse_schema, physical_partition_columns
from rlcd.reconcile.classify import SOURCE_COMPACTED

__all__ = (
    "OUTCOMES",
    "partition_columns",
    "bin_outcome",
    "bin_lines",
    "outcome_tally",
    "run_summary",
)

OUTCOMES = (
    "committed",
    "reconciled by remap",
    "reconciled by mask",
    "superseded",
    "aborted",
    "failed",
)
"""What can become of a planned bin, in the order a tally lists them."""


def partition_columns(report: CompactionReport) -> tuple[str, ...]:
    """The table's partition columns as ``partitionValues`` names them (physical names under
    column mapping), in the table's order; the logical names if the schema cannot say."""
    if report.snapshot is None:
        return ()
    metadata = report.snapshot.metadata
    columns = tuple(metadata.partition_columns)
    try:
        mode = column_mapping_mode(metadata.configuration)
        return physical_partition_columns(parse_schema(metadata.schema_string), columns, mode)
    except (ValueError, KeyError, TypeError):
        return columns


def _outcome(result: BinResult | BinFailure) -> str:
    if isinstance(result, BinCommitted):
        return result.decision.replace("_", " ")
    if isinstance(result, BinAborted):
        return "superseded" if result.abort.reason == SOURCE_COMPACTED else "aborted"
    if result.kind is FailureKind.SUPERSEDED:
        return "superseded"
    return "aborted" if result.kind is FailureKind.CONFLICT else "failed"


def _reconciled(result: BinCommitted) -> str:
    parts = []
    if result.masked_sources:
        parts.append(
            f"{count(result.masked_sources, 'source')} masked "
            f"({count(result.masked_positions, 'position')})"
        )
    if result.remapped_sources:
        parts.append(
            f"{count(result.remapped_sources, 'source')} remapped "
            f"({count(result.remapped_positions, 'position')})"
        )
    return ", ".join(parts)


def _copied(result: BinCommitted) -> str:
    """`` (3 row groups copied, 180000000 bytes, 175000000 by the store; 2000000 bytes
    re-encoded)`` for an output that copied any row group, else nothing."""
    done = result.done
    if not done.copied_row_groups:
        return ""
    server = f", {done.server_copied_bytes} by the store" if done.server_copied_bytes else ""
    return (
        f" ({count(done.copied_row_groups, 'row group')} copied, {done.copied_bytes} bytes"
        f"{server}; {done.reencoded_bytes} bytes re-encoded)"
    )


def bin_outcome(result: BinResult | BinFailure) -> str:
    """One bin's fate: ``committed: 12 files -> 1 file`` (and what it copied, if anything),
    ``reconciled by mask: 1 source
    masked (250000 positions): 11 files removed -> 1 file``, ``aborted: <reason>: <detail>``,
    ``superseded (another compaction did its work): source_compacted: <detail>``,
    ``failed: <why>``."""
    outcome = _outcome(result)
    if isinstance(result, BinCommitted):
        how = _reconciled(result)
        sources = len(result.done.bin.sources)
        removed = len(result.removed)
        files = count(removed, "file") if removed == sources else f"{removed} of {sources} files"
        added = count(result.files_added, "file") if result.files_added else "no file"
        dropped = " (every row deleted)" if result.output_dropped else ""
        return f"{outcome}: {how + ': ' if how else ''}{files} -> {added}{dropped}{_copied(result)}"
    reason = str(result.abort) if isinstance(result, BinAborted) else result.reason
    if outcome == "superseded":
        return f"superseded (another compaction did its work): {reason}"
    return f"{outcome}: {reason}"


def _results(report: CompactionReport) -> dict[str, BinResult | BinFailure]:
    """Each judged bin's result by bin id: the commit's decision, else why it failed."""
    judged: dict[str, BinResult | BinFailure] = {r.done.bin.bin_id: r for r in report.bin_results}
    for failure in report.failed:
        judged.setdefault(failure.bin.bin_id, failure)
    return judged


def bin_lines(report: CompactionReport) -> list[str]:
    """``bin <id>  <partition>: <outcome>`` for each planned bin that ended, in plan order."""
    columns = partition_columns(report)
    results = _results(report)
    return [
        f"bin {b.bin_id}  {partition_text(b.partition_values, columns)}: "
        f"{bin_outcome(results[b.bin_id])}"
        for b in report.planned
        if b.bin_id in results
    ]


def outcome_tally(report: CompactionReport) -> str:
    """``3 committed, 1 reconciled by mask, 1 aborted``: the bins by outcome, none left out."""
    tally = Counter(_outcome(r) for r in _results(report).values())
    return ", ".join(f"{tally[o]} {o}" for o in OUTCOMES if tally[o])


def run_summary(report: CompactionReport) -> str:
    """One line: the commit's version and exact file counts, then the bins by outcome."""
    bins = count(len(report.planned), "bin")
    if report.committed_version is None:
        head = f"nothing committed of {bins}"
    else:
        head = (
            f"committed version {report.committed_version}: "
            f"{count(report.files_removed, 'file')} removed -> {count(report.files_added, 'file')}"
            f" added; {bins}"
        )
    return f"{head}: {outcome_tally(report)}"
