"""Human-readable reports of a plan, a compaction and a verification."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from rlcd.compaction.words import count, partition_text, unfinished_write

if TYPE_CHECKING:  # for annotations only: `rlcd --help` must not import the compaction stack
    from rlcd.compaction.cleanup import CleanupReport
    from rlcd.compaction.compact import CompactionReport
    from rlcd.compaction.rewrite import CopySummary
    from rlcd.operations.verify import VerifyReport

__all__ = (
    "print_plan",
    "print_compaction",
    "print_cleanup",
    "print_verify",
    "human_bytes",
)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:g}s"


def print_cleanup(report: CleanupReport | None, out: TextIO) -> None:
    """One line when earlier runs' leftovers were (or, in a dry run, would be) removed, or
    could not be judged; nothing when there were none."""
    if report is None:
        return
    if report.removed:
        verb = "would remove" if report.dry_run else "removed"
        out.write(
            f"  {verb} leftovers of earlier runs older than {_duration(report.grace_s)}: "
            f"{count(len(report.deleted), 'uncommitted file')} "
            f"({human_bytes(report.bytes_deleted)}), "
            f"{count(len(report.aborted), unfinished_write(report.table))}\n"
        )
    if report.failed:
        out.write(f"  could not remove {count(len(report.failed), 'leftover')}; see the log\n")
    if report.skipped is not None:
        out.write(f"  leftovers not cleaned: {report.skipped}\n")


def print_plan(report: CompactionReport, out: TextIO) -> None:
    """The bins a run would compact: files, bytes and expected outputs."""
    from rlcd.compaction.summary import partition_columns  # loaded by the run already

    bins = report.planned
    files = sum(b.num_sources for b in bins)
    size = sum(b.source_bytes for b in bins)
    out.write(
        f"plan for {report.table} at version {report.read_version} "
        f"(target {human_bytes(report.policy.target_file_size)}): {count(len(bins), 'bin')}, "
        f"{count(files, 'file')}, {human_bytes(size)} -> {count(len(bins), 'output')}\n"
    )
    print_cleanup(report.cleanup, out)
    copies = report.copies or (None,) * len(bins)
    if report.copy_plans_read:
        read = [c for c in copies if c is not None]
        out.write(
            f"  copy plans read for {count(report.copy_plans_read, 'bin')}; "
            f"in all, {_copy_text(read)}\n"
        )
    columns = partition_columns(report)
    for b, copy in zip(bins, copies, strict=True):
        purge = "  (purges deletion vectors)" if b.purges_dvs else ""
        copied = ""
        if copy is not None:
            copied = f"; {_copy_text([copy])}"
        out.write(
            f"  bin {b.bin_id}  {partition_text(b.partition_values, columns)}: "
            f"{count(b.num_sources, 'file')}, {human_bytes(b.source_bytes)} "
            f"-> 1 file ({human_bytes(b.estimated_bytes)} of live rows){purge}{copied}\n"
        )
    if report.copy_plans_unread:
        out.write(
            f"  copy plans not read for the other {count(report.copy_plans_unread, 'bin')} "
            "that may copy row groups (shown without what they copy): "
            "--copy-plans all reads every one\n"
        )
    if report.layouts_unread:
        out.write(
            f"  layouts not read for {count(report.layouts_unread, 'bin')} that may copy row "
            "groups: a run may pack their files otherwise, each writer's files apart "
            "(--copy-plans all reads every one)\n"
        )
    if not bins:
        out.write("  nothing to compact\n")


def _copy_text(copies: Sequence[CopySummary]) -> str:
    """What copy plans copy and re-encode, summed."""
    copied = count(sum(c.copied_row_groups for c in copies), "row group")
    reencoded = count(sum(c.reencoded_row_groups for c in copies), "row group")
    copied_bytes = human_bytes(sum(c.copied_bytes for c in copies))
    reencoded_bytes = human_bytes(sum(c.reencoded_bytes for c in copies))
    patched = sum(c.patched_row_groups for c in copies)
    if patched:
        patched_bytes = human_bytes(sum(c.patched_bytes for c in copies))
        copied_bytes += f"; {patched} with decimal columns re-encoded, {patched_bytes}"
    return f"copies {copied} ({copied_bytes}), re-encodes {reencoded} ({reencoded_bytes})"


def print_compaction(report: CompactionReport, out: TextIO) -> None:
    """The outcome of a run: the commit with the files it really removed and added, the bins
    by outcome, then each bin: committed, reconciled (how, how many positions), superseded by
    another compaction, aborted or failed (with the reason)."""
    from rlcd.compaction.summary import bin_lines, outcome_tally  # loaded by the run already

    if not report.planned:
        out.write(f"{report.table}: nothing to compact at version {report.read_version}\n")
        print_cleanup(report.cleanup, out)
        return
    bins = f"{count(len(report.planned), 'bin')}: {outcome_tally(report)}"
    if report.committed_version is not None:
        out.write(
            f"{report.table}: committed version {report.committed_version}: "
            f"{count(report.files_removed, 'file')} ({human_bytes(report.bytes_removed)}) -> "
            f"{count(report.files_added, 'file')} ({human_bytes(report.bytes_added)}); {bins}\n"
        )
        if report.untagged:
            out.write(
                f"  {count(report.untagged, 'bin')} committed without composition tags "
                "(the capture guard did not hold)\n"
            )
    else:
        out.write(f"{report.table}: nothing committed; {bins}\n")
    print_cleanup(report.cleanup, out)
    for line in bin_lines(report):
        out.write(f"  {line}\n")


def print_verify(report: VerifyReport, out: TextIO, *, exit_code: int | None = None) -> None:
    """What each half checked and skipped, every problem on its own line naming the file, and
    the verdict (with the exit code the command returns, when given)."""
    out.write(f"{report.table} at version {report.version}\n")
    files = report.files
    if files is None:
        out.write("files: not checked\n")
    else:
        footers = f", {count(files.footers, 'footer')} read" if files.footers else ""
        read = "" if files.read is None else f", {files.read} read in full"
        out.write(
            f"files: {count(files.files, 'live file')} checked "
            f"({count(files.dvs, 'deletion vector')}{footers}{read}): "
            f"{count(len(files.problems), 'problem')}\n"
        )
        for file_problem in files.problems:
            out.write(f"  problem: {file_problem}\n")
    commits = report.commits
    if commits is None:
        out.write("tags: not checked\n")
    elif not commits:
        out.write("tags: no commit with composition tags in the log\n")
    else:
        statuses = [c.status for c in commits]
        skipped = statuses.count("skipped")
        why = f" ({_GONE})" if skipped else ""
        out.write(
            f"tags: {count(len(commits), 'tagged commit')}: {statuses.count('ok')} ok, "
            f"{skipped} skipped{why}, {statuses.count('FAILED')} failed\n"
        )
    for c in commits or ():
        outputs_gone = f" ({c.outputs_skipped} {_GONE})" if c.outputs_skipped else ""
        sources_gone = f" ({_GONE})" if c.sources_skipped else ""
        unchecked = (
            f", {c.sources_unchecked} not checked (their output is {_GONE})"
            if c.sources_unchecked
            else ""
        )
        untagged = f", {c.sources_untagged} untagged (not checked)" if c.sources_untagged else ""
        out.write(
            f"  version {c.version}: {c.status}: {c.outputs} outputs{outputs_gone}, "
            f"{c.sources_checked} sources checked, {c.sources_skipped} skipped{sources_gone}"
            f"{unchecked}{untagged}\n"
        )
        for note in c.notes:
            out.write(f"    note: {note}\n")
        for problem in c.problems:
            out.write(f"    problem: {problem}\n")
    code = f" (exit {exit_code})" if exit_code is not None else ""
    if report.ok:
        out.write(f"verified{code}\n")
    else:
        out.write(f"verification FAILED: {count(report.problems, 'problem')}{code}\n")


_GONE = "gone from storage"  # vacuumed since: history, not a problem
