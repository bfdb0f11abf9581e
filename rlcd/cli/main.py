"""The rlcd command line.

Output: the report of a run goes to stdout, for people. Log events go to stderr, as JSON lines
when stderr is not a terminal or with --log-format json, human-readable otherwise. The
warnings a report already states (a bin that did not commit, leftovers removed or not
cleaned) are not logged again unless --log-format json asks for every event, for machines;
so each warning appears once.

Exit codes: :mod:`rlcd.cli.exit_codes` (its ``EXIT_HELP`` is every command's epilog).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import anyio
import anyio.abc

from rlcd import __version__
from rlcd.cli import daemon as daemon_commands
from rlcd.cli.exit_codes import (
    EXIT_BROKEN_PIPE,
    EXIT_HELP,
    EXIT_LEASED,
    EXIT_OK,
    EXIT_PROBLEM,
    error_exit_code,
    exit_code,
)
from rlcd.cli.process import configure_process, scratch_dir
from rlcd.cli.report import human_bytes, print_compaction, print_plan, print_verify
from rlcd.cli.sizes import parse_size_flag
from rlcd.compaction.policy import CODECS, ENCODINGS, REWRITES
from rlcd.compaction.words import count, unfinished_write
from rlcd.errors import ConfigError, RlcdError

if TYPE_CHECKING:  # annotations only: `rlcd --help` must not import the compaction stack
    from rlcd.cli.progress import BinProgress
    from rlcd.compaction.compact import CompactionReport
    from rlcd.compaction.lease import Busy, LeaseHold
    from rlcd.delta.actions import Protocol
    from rlcd.storage import ObjectStore

__all__ = ("main", "run")

_COPY_PLANS = 100
"""The bins whose copy plans ``compact --dry-run`` reads by default: a sample costing about a
second or less, so a dry run of a million files comes back in about its plan's time (reading
every bin's footers takes minutes; docs/performance.md)."""

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_REPORTED_EVENTS = frozenset(
    {
        "bin_failed",
        "bin_aborted",
        "orphans_removed",
        "orphans_found",
        "cleanup_skipped",
        "vacuum_short_retention",
    }
)
"""Log events the printed report states already: not logged again for people."""


def _add_log_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The logging options, on the command and on every subcommand (so they work after it):
    a subcommand only sets what was given there."""
    default = (lambda value: value) if top else (lambda _value: argparse.SUPPRESS)
    parser.add_argument(
        "--log-level",
        default=default("warning"),
        choices=["debug", "info", "warning", "error"],
        help="least severe log events shown (default warning; rlcd run logs at its config's "
        "[log] level)",
    )
    parser.add_argument(
        "--log-format",
        default=default("auto"),
        choices=["auto", "json", "console"],
        help="log events as JSON lines, or for people; auto: JSON unless stderr is a terminal",
    )


class _Subcommand(argparse.ArgumentParser):
    """A subcommand's parser: takes the logging options too."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        _add_log_options(self, top=False)


def _add_s3_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "S3",
        "unset options follow the AWS environment (AWS_PROFILE, AWS_REGION, "
        "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL) and the standard credential chain",
    )
    group.add_argument("--endpoint-url", help="S3-compatible endpoint (MinIO, R2, moto)")
    group.add_argument("--region")
    group.add_argument("--profile")
    group.add_argument("--addressing-style", choices=["auto", "virtual", "path"])


def _positive(text: str) -> int:
    """A whole number of at least 1 (argparse names the option in the error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlcd",
        description="Compact the small files of Delta Lake tables, on S3 or local disk.",
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rlcd {__version__}")
    _add_log_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Subcommand)

    demo = sub.add_parser(
        "demo",
        help="run the daemon on moto S3 with three tables and a concurrent writer "
        "(--one-shot: build a local table, compact it once, verify it)",
        description="Run the daemon on moto's S3 with three generated tables of small files "
        "while a writer appends and deletes rows, print each table before and after, and "
        "check every table's rows with deltalake against what the writer left; the config, "
        "the daemon's log and the tables stay in --path (needs the demo extra). --one-shot "
        "instead builds a local table, compacts it once and verifies it.",
    )
    demo.add_argument(
        "--one-shot", action="store_true", help="the local one-shot demo instead of the daemon"
    )
    demo.add_argument(
        "--seconds", type=float, default=20.0, help="how long the writer runs (default 20)"
    )
    demo.add_argument(
        "--path",
        type=Path,
        help="the folder to (re)create for the config, the daemon's log and the tables "
        "(default: ./demo), or with --one-shot for the table (default: ./demo-table); a "
        "directory is only replaced if an earlier demo made it",
    )
    demo.add_argument(
        "--files", type=int, default=24, help="small files per table to write (default 24)"
    )
    demo.add_argument(
        "--rows", type=int, default=2000, help="--one-shot: rows per file (default 2000)"
    )

    compact = sub.add_parser(
        "compact",
        help="compact a table's small files once",
        description="Compact a table's small files once: plan bins of small files, rewrite "
        "each bin into one file, commit them all in one OPTIMIZE commit.",
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compact.add_argument("table", help="s3://bucket/prefix, file:///path or a local path")
    compact.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    compact.add_argument(
        "--target-size",
        help="target output size: 128MiB (powers of 1024) or 100MB (powers of 1000); default: "
        "the table's delta.targetFileSize, else 128MiB",
    )
    compact.add_argument(
        "--min-size",
        help="files below this are compacted, in the units of --target-size (default: half "
        "the target)",
    )
    compact.add_argument(
        "--where",
        help="only partitions where this is true, e.g. \"date >= '2026-11-01' AND n IN (1, 2)\" "
        "(=, !=, <, <=, >, >=, IN, IS [NOT] NULL, AND, OR, NOT over partition columns; "
        "quote strings and dates)",
    )
    compact.add_argument("--max-bins", type=int, help="compact at most this many bins")
    compact.add_argument(
        "--codec",
        default="zstd",
        choices=sorted(CODECS),
        help="output compression (default zstd)",
    )
    compact.add_argument(
        "--min-file-age",
        default="0",
        metavar="DURATION",
        help="leave files younger than this alone (by their add's modificationTime), e.g. 5m: "
        "the files a concurrent writer's DML is most likely to touch (default 0: all files)",
    )
    compact.add_argument(
        "--orphan-grace",
        default="1h",
        metavar="DURATION",
        help="first remove rlcd's own leftovers of killed runs (unfinished uploads or temp files, "
        "uncommitted outputs) older than this, e.g. 30m, 2h (default 1h); it must exceed the "
        "longest run",
    )
    compact.add_argument(
        "--no-lease",
        action="store_true",
        help="do not take the table's lease (_rlcd/lease), which keeps other runs of rlcd from "
        "compacting or cleaning the table at the same time (correctness never depends on it)",
    )
    compact.add_argument(
        "--lease-ttl",
        default="60s",
        metavar="DURATION",
        help="how long the lease lasts unrenewed: how long a killed run keeps others off the "
        "table (default 60s; renewed every third of it)",
    )
    compact.add_argument(
        "--encodings",
        choices=ENCODINGS,
        default=ENCODINGS[0],
        help="column encodings: adaptive (chosen per column from the data) or conservative "
        "(a dictionary while it stays small); default adaptive",
    )
    compact.add_argument(
        "--rewrite",
        choices=REWRITES,
        default=REWRITES[0],
        help="auto: copy row groups that need no re-encoding byte for byte (clean sources with "
        "the table's schema and large row groups), re-encode the rest; reencode: decode and "
        "encode every row; default auto",
    )
    compact.add_argument(
        "--recompress",
        action="store_true",
        help="re-encode row groups whose codec is not --codec instead of copying them "
        "(smaller outputs, more CPU)",
    )
    compact.add_argument(
        "--min-copy-row-group",
        metavar="SIZE",
        help="the least compressed bytes a row group needs to be copied, in the units of "
        "--target-size (default 4MiB); smaller ones are re-encoded into full ones",
    )
    compact.add_argument(
        "--copy-plans",
        type=_copy_plans,
        default=_COPY_PLANS,
        metavar="N|all",
        help="--dry-run: read the footers of the first N bins that may copy row groups, in plan "
        f"order, to show what each copies (default {_COPY_PLANS}; all: every bin, which at a "
        "million files reads most of their footers and takes minutes)",
    )
    _add_s3_options(compact)

    verify = sub.add_parser(
        "verify",
        help="check the live files and the composition tags against storage",
        description="Check that every live file and deletion vector of the current snapshot "
        "is on storage as the log describes it (size, DV checksum and cardinality, DV rows "
        "within the file), and that every commit with composition tags still matches the data "
        "it describes. --deep also reads every live file in full (page checksums where the "
        "writer stored them, every row group decoded), so a changed byte is found. History "
        "removed by VACUUM is reported as skipped, not as a failure. Exit 0 when everything "
        "checked out, 1 when a problem was found.",
    )
    verify.add_argument("table", help="s3://bucket/prefix, file:///path or a local path")
    half = verify.add_mutually_exclusive_group()
    half.add_argument(
        "--tags-only",
        action="store_true",
        help="only check the tagged commits (reads their data files)",
    )
    half.add_argument(
        "--files-only",
        action="store_true",
        help="only check the live files (a HEAD each, plus their deletion vectors)",
    )
    verify.add_argument(
        "--deep",
        action="store_true",
        help="also read every live file in full: page checksums where the writer stored them, "
        "every row group decoded and validated, row counts against the footer and the stats",
    )
    verify.add_argument(
        "--concurrency",
        type=_positive,
        metavar="N",
        help="live files checked at once (default 16; with --deep 4, each holding up to 32 MiB "
        "of a remote file)",
    )
    _add_s3_options(verify)
    _add_delete_commands(sub)
    _add_vacuum_command(sub)
    _add_checkpoint_command(sub)
    daemon_commands.add_commands(sub)
    return parser


def _add_delete_commands(sub: argparse._SubParsersAction[_Subcommand]) -> None:
    delete = sub.add_parser(
        "delete",
        help="delete the rows a predicate matches, through deletion vectors",
        description="Delete the rows where a predicate is true, in one DELETE commit: each "
        "file with matches gets a deletion vector (no data file is rewritten). Losing the race "
        "to a compaction moves the deletions onto its output; to a DV delete of other rows of "
        "the same file merges them; to a writer that added rows (other than a blind append) "
        "deletes the added rows the predicate matches too; any other conflict exits 1 with "
        "nothing committed.",
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    delete.add_argument("table", help="s3://bucket/prefix, file:///path or a local path")
    delete.add_argument(
        "--where",
        required=True,
        help="the rows to delete, e.g. \"region = 'eu' AND amount < 0\" (=, !=, <, <=, >, >=, "
        "IN, IS [NOT] NULL, AND, OR, NOT over data and partition columns)",
    )
    delete.add_argument(
        "--dry-run",
        action="store_true",
        help="print the files and rows it would delete (also on a table rlcd enable-dv has "
        "not upgraded yet)",
    )
    _add_s3_options(delete)
    enable = sub.add_parser(
        "enable-dv",
        help="upgrade a table's protocol so rlcd delete may write deletion vectors",
        description="Upgrade the table's protocol to reader 3 / writer 7 with the "
        "deletionVectors feature (keeping every feature it has) and set "
        "delta.enableDeletionVectors=true, in one commit. Readers without deletion vector "
        "support can no longer read the table: check them first.",
    )
    enable.add_argument("table", help="s3://bucket/prefix, file:///path or a local path")
    enable.add_argument("--yes", action="store_true", help="upgrade the protocol")
    enable.add_argument("--dry-run", action="store_true", help="print the change, write nothing")
    _add_s3_options(enable)


def _add_vacuum_command(sub: argparse._SubParsersAction[_Subcommand]) -> None:
    vacuum = sub.add_parser(
        "vacuum",
        help="delete the data and DV files no version inside the retention window reads",
        description="Delete the files that the table's log no longer references within the "
        "retention (delta.deletedFileRetentionDuration, default 1 week), as Spark's VACUUM "
        "does: --lite (the default) deletes the files of expired tombstones, reading only the "
        "log; --full also lists the table and deletes every unreferenced file older than the "
        "retention. _delta_log, hidden paths and anything outside the table stay. The run is "
        "recorded as VACUUM START / VACUUM END commits.",
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    vacuum.add_argument("table", help="s3://bucket/prefix, file:///path or a local path")
    vacuum.add_argument(
        "--retain",
        metavar="DURATION",
        help="keep what versions of this age read, e.g. 168h, 7d, 'interval 1 week' "
        "(default: the table's delta.deletedFileRetentionDuration); below the table's "
        "retention only with --force-short-retention",
    )
    vacuum.add_argument(
        "--force-short-retention",
        action="store_true",
        help="allow --retain below the table's retention: time travel to older versions, and "
        "writers in flight, may break",
    )
    vacuum.add_argument(
        "--dry-run", action="store_true", help="list the files it would delete, delete nothing"
    )
    mode = vacuum.add_mutually_exclusive_group()
    mode.add_argument(
        "--lite",
        dest="mode",
        action="store_const",
        const="lite",
        help="only the files of expired tombstones; reads the log, lists nothing (default)",
    )
    mode.add_argument(
        "--full",
        dest="mode",
        action="store_const",
        const="full",
        help="also every unreferenced file under the table older than the retention",
    )
    vacuum.set_defaults(mode="lite")
    _add_s3_options(vacuum)


def _add_checkpoint_command(sub: argparse._SubParsersAction[_Subcommand]) -> None:
    checkpoint = sub.add_parser(
        "checkpoint",
        help="write a checkpoint of the table's current version",
        description="Write the checkpoint of the table's latest version (classic single file, "
        "or V2 with the v2Checkpoint feature) and update _delta_log/_last_checkpoint, then "
        "delete the log files older than delta.logRetentionDuration that no version inside "
        "it needs (unless delta.enableExpiredLogCleanup is false). A version that has a "
        "checkpoint already keeps it. rlcd also writes one after its own commits on every "
        "multiple of delta.checkpointInterval.",
        epilog=EXIT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    checkpoint.add_argument("table", help="s3://bucket/prefix, file:///path or a local path")
    _add_s3_options(checkpoint)


async def _checkpoint(args: argparse.Namespace) -> int:
    from rlcd.delta.checkpoint_writer import CheckpointWritten, checkpoint_and_clean
    from rlcd.delta.load import load_snapshot
    from rlcd.delta.log_path import SIDECAR_DIR

    async with _open(args) as store:
        run = await checkpoint_and_clean(store, await load_snapshot(store))
    result, cleaned = run.checkpoint, run.cleaned
    if isinstance(result, CheckpointWritten):
        sidecars = (
            f" with {count(len(result.sidecars), 'sidecar')} of "
            f"{human_bytes(result.sidecar_bytes)} in {SIDECAR_DIR}"
            if result.sidecars
            else ""
        )
        print(
            f"{store.root}: wrote {result.key} for version {result.version} "
            f"({count(result.actions, 'action')}, {count(result.add_files, 'live file')}, "
            f"{human_bytes(result.size_in_bytes)}){sidecars}"
        )
    else:
        print(f"{store.root}: version {result.version} has a checkpoint already: {result.key}")
    if cleaned is not None:
        print(
            f"{store.root}: deleted {count(cleaned.files, 'expired log file')} "
            f"({human_bytes(cleaned.bytes)}) before the checkpoint of version {cleaned.kept}"
        )
    return EXIT_OK


async def _vacuum(args: argparse.Namespace) -> int:
    from rlcd.operations.vacuum import parse_retain, vacuum_table

    retain_ms = None
    if args.retain is not None:
        try:
            retain_ms = parse_retain(args.retain)
        except ValueError as exc:
            raise ConfigError(f"bad --retain: {exc}") from exc
    async with _open(args) as store:
        report = await vacuum_table(
            store,
            mode=args.mode,
            retain_ms=retain_ms,
            allow_short_retention=args.force_short_retention,
            dry_run=args.dry_run,
        )
    for warning in report.warnings:
        print(f"rlcd: warning: {warning}", file=sys.stderr)
    for outside in report.outside:
        print(
            f"rlcd: {report.table}: not deleted: {outside.path}: {outside.reason}", file=sys.stderr
        )
    if args.dry_run:
        for f in report.files:
            print(f"  {f.key}")
    size = human_bytes(report.bytes)
    files = count(len(report.files) if args.dry_run else report.deleted, "file")
    verb = "would delete" if args.dry_run else "deleted"
    versions = (
        f" (versions {report.start_version}-{report.end_version})"
        if report.start_version is not None
        else ""
    )
    print(f"{report.table}: {report.mode} vacuum {verb} {files}, {size}{versions}")
    return EXIT_OK


async def _delete(args: argparse.Namespace) -> int:
    from rlcd.errors import ConcurrentModificationError
    from rlcd.operations.delete import ENABLE_DV_STEP, delete_where

    async with _open(args) as store:
        try:
            report = await delete_where(store, args.where, dry_run=args.dry_run)
        except ConcurrentModificationError as exc:  # a lost race, like a bin that lost
            print(f"rlcd: {exc}", file=sys.stderr)
            return EXIT_PROBLEM
    if args.dry_run:
        for f in report.files:
            print(f"  {f.path}: {count(f.rows, 'row')}")
    verb = "would delete" if args.dry_run else "deleted"
    at = f" in version {report.version}" if report.version is not None else ""
    files = len(report.files) + len(report.concurrent)
    print(
        f"{report.table}: {verb} {count(report.rows, 'row')} in "
        f"{count(files, 'file')}{at} ({count(report.files_read, 'data file')} read)"
    )
    if report.concurrent:
        rows = sum(f.rows for f in report.concurrent)
        print(
            f"  {count(rows, 'row')} of them in {count(len(report.concurrent), 'file')} "
            "another writer committed while the delete ran"
        )
    if not report.dvs_allowed:
        print(
            "  the table does not allow deletion vectors yet: the real run needs " + ENABLE_DV_STEP
        )
    return EXIT_OK


def _protocol_text(protocol: Protocol) -> str:
    features = sorted(set(protocol.reader_features or ()) | set(protocol.writer_features or ()))
    listed = f" ({', '.join(features)})" if features else ""
    return f"reader {protocol.min_reader_version} / writer {protocol.min_writer_version}{listed}"


async def _enable_dv(args: argparse.Namespace) -> int:
    from rlcd.errors import ConcurrentModificationError
    from rlcd.operations.enable_dv import DV_PROPERTY, READER_WARNING, enable_dv

    async with _open(args) as store:
        try:
            plan = await enable_dv(store, dry_run=args.dry_run, confirmed=args.yes)
        except ConcurrentModificationError as exc:
            print(f"rlcd: {exc}", file=sys.stderr)
            return EXIT_PROBLEM
    if plan.nothing_to_do:
        print(f"{plan.table}: deletion vectors are enabled already; nothing to do")
        return EXIT_OK
    changes = [f"set {DV_PROPERTY}=true"] if plan.set_property else []
    if plan.protocol is not None:
        changes.insert(
            0,
            f"upgrade the protocol from {_protocol_text(plan.before)} to "
            f"{_protocol_text(plan.protocol)}",
        )
    if plan.version is None:
        print(f"{plan.table}: would {' and '.join(changes)}")
        if plan.protocol is not None:
            print(f"  {READER_WARNING}")
    else:
        print(f"{plan.table}: {' and '.join(changes)}: committed version {plan.version}")
    return EXIT_OK


def _open(args: argparse.Namespace) -> AbstractAsyncContextManager[ObjectStore]:
    """The store of the command's table, with its S3 options (the storage stack is imported
    here, not by ``--help``)."""
    from rlcd.storage import S3Config, open_store

    s3 = S3Config(
        endpoint_url=args.endpoint_url,
        region=args.region,
        profile=args.profile,
        addressing_style=args.addressing_style,
    )
    return open_store(args.table, s3=s3)


async def _demo(args: argparse.Namespace) -> int:
    from rlcd.cli.demo import run_demo

    if not args.one_shot:
        from rlcd.cli.daemon_demo import run_daemon_demo

        folder = (args.path or Path("demo")).resolve()
        ok = await run_daemon_demo(
            sys.stdout, folder=folder, files=args.files, seconds=args.seconds
        )
        return EXIT_OK if ok else EXIT_PROBLEM

    path = (args.path or Path("demo-table")).resolve()
    result = await run_demo(path, files=args.files, rows=args.rows, out=sys.stdout)
    return EXIT_OK if result.ok else EXIT_PROBLEM


@dataclass
class _Run:
    """How far the command got, for when a signal stops it."""

    progress: BinProgress | None = None
    report: CompactionReport | None = None
    table: str = ""
    """The store's root URI, once it is open."""

    def abandoned(self) -> str:
        """What the stopped run leaves undone: its bins rewritten, in flight and waiting."""
        progress = self.progress
        if progress is None or not progress.total:
            return "no bin had started; nothing was written"
        waiting = progress.total - progress.done - progress.in_flight
        counts = [f"{progress.in_flight} in flight"]
        counts += [f"{progress.done} rewritten"] if progress.done else []
        counts += [f"{waiting} not started"] if waiting else []
        return (
            f"abandoned {count(progress.total, 'bin')} ({', '.join(counts)}; outputs and "
            f"{unfinished_write(self.table)}s deleted); nothing was committed"
        )


def _copy_plans(text: str) -> int | None:
    """``--copy-plans``: a count of bins, or ``all`` (None)."""
    if text == "all":
        return None
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of bins or 'all'")
    return n


async def _compact(args: argparse.Namespace, run: _Run) -> int:
    from rlcd.cli.progress import BinProgress
    from rlcd.compaction.compact import compact_table
    from rlcd.compaction.lease import Busy
    from rlcd.compaction.policy import CompactionPolicy, parse_duration

    try:
        sizes = {"target_file_size": parse_size_flag(args.target_size)} if args.target_size else {}
        min_size = parse_size_flag(args.min_size) if args.min_size else None
        if args.min_copy_row_group:
            sizes["min_copy_row_group"] = parse_size_flag(args.min_copy_row_group)
    except ValueError as exc:
        raise ConfigError(f"bad size: {exc}") from exc
    try:
        grace_s = parse_duration(args.orphan_grace)
    except ValueError as exc:
        raise ConfigError(f"bad --orphan-grace: {exc}") from exc
    try:
        min_age_ms = round(parse_duration(args.min_file_age) * 1000)
    except ValueError as exc:
        raise ConfigError(f"bad --min-file-age: {exc}") from exc
    try:
        lease_ttl_s = parse_duration(args.lease_ttl)
    except ValueError as exc:
        raise ConfigError(f"bad --lease-ttl: {exc}") from exc
    if lease_ttl_s <= 0:
        raise ConfigError(f"bad --lease-ttl: {args.lease_ttl} is not positive")
    where = None
    if args.where is not None:  # the parser's ~30 classes cost start-up a run without it skips
        from rlcd.delta.predicate import Predicate

        where = Predicate.parse(args.where)
    policy = CompactionPolicy(
        **sizes,
        min_file_size=min_size,
        max_bins=args.max_bins,
        partition_filter=where,
        codec=args.codec,
        encodings=args.encodings,
        rewrite=args.rewrite,
        recompress=args.recompress,
    )
    async with _open(args) as store, _lease(store, args, lease_ttl_s) as lease:
        if isinstance(lease, Busy):
            print(f"{store.root}: skipped: the table's lease is {lease.describe()}; nothing done")
            return EXIT_LEASED
        run.progress = progress = BinProgress(sys.stderr)
        run.table = store.root
        run.report = await compact_table(
            store,
            policy,
            dry_run=args.dry_run,
            predicate=(args.where,) if args.where is not None else (),
            on_plan=progress.start,
            on_bin_start=progress.begin,
            on_bin_done=progress.advance,
            orphan_grace_s=grace_s,
            min_file_age_ms=min_age_ms,
            copy_plans=args.copy_plans,
        )
    return _compacted(args, run.report)


def _lease(
    store: ObjectStore, args: argparse.Namespace, ttl_s: float
) -> AbstractAsyncContextManager[LeaseHold | Busy | None]:
    """The table's lease for the run (a dry run writes nothing and takes none; ``--no-lease``
    takes none either)."""
    if args.dry_run or args.no_lease:
        return nullcontext(None)
    from rlcd.compaction.lease import hold_lease, owner

    return hold_lease(store, owner=owner("rlcd compact"), ttl_s=ttl_s)


def _compacted(args: argparse.Namespace, report: CompactionReport) -> int:
    """Print a finished run's report; its exit code."""
    if args.dry_run:
        print_plan(report, sys.stdout)
        return EXIT_OK
    print_compaction(report, sys.stdout)
    return exit_code(report)


async def _verify(args: argparse.Namespace) -> int:
    from rlcd.cli.progress import FileProgress
    from rlcd.operations.verify import verify_table

    if args.deep and args.tags_only:
        raise ConfigError("--deep reads the live files: it does not go with --tags-only")
    progress = FileProgress(sys.stderr)
    async with _open(args) as store:
        try:
            report = await verify_table(
                store,
                files=not args.tags_only,
                tags=not args.files_only,
                deep=args.deep,
                concurrency=args.concurrency,
                on_file=progress,
            )
        finally:
            progress.finish()
    code = EXIT_OK if report.ok else EXIT_PROBLEM
    print_verify(report, sys.stdout, exit_code=code)
    return code


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


async def _until_stopped(handler: Callable[[], Awaitable[int]]) -> int:
    """Run the command; SIGINT or SIGTERM cancels it (its cleanup still runs, shielded where
    it must finish) and raises :class:`_Stopped`."""
    stopped: list[int] = []
    outcome: list[int] = []
    failure: list[Exception] = []
    work = anyio.CancelScope()

    async def watch(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
            task_status.started()
            async for signum in signals:  # a second signal is ignored: cleanup is running
                if not stopped:
                    stopped.append(signum)
                    work.cancel()

    async with anyio.create_task_group() as tg:
        await tg.start(watch)
        with work:
            try:
                outcome.append(await handler())
            except Exception as exc:
                failure.append(exc)
        tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
    if outcome:
        return outcome[0]
    raise _Stopped(stopped[0])


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        from rlcd.daemon.logging import configure_logging  # structlog, asyncio: not for --help

        configure_logging(
            level=args.log_level,
            json={"auto": None, "json": True, "console": False}[args.log_format],
            drop_events=() if args.log_format == "json" else _REPORTED_EVENTS,
        )
        code = _main(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # the reader went away (`rlcd compact ... | head -1`): nothing more can reach it, and
        # the flush at exit must not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:  # before the command's own handler was in place
        print("rlcd: stopped by SIGINT", file=sys.stderr)
        return 128 + signal.SIGINT


def run() -> NoReturn:
    """The ``rlcd`` command (and ``python -m rlcd``): the process settings, :func:`main`, then
    exit at once.

    The settings (:mod:`rlcd.cli.process`) are made here, not when the package is imported: a
    process that imports rlcd as a library, numpy and all, keeps its own.

    By the time ``main`` returns, everything rlcd writes is written and closed, and its threads
    are idle. What the interpreter would do next, free every object and module one by one, costs
    ~0.1 s of CPU and wall time after a compaction (more with the S3 stack loaded), and nobody
    waits for it. Output is flushed first; a usage error or ``--help`` (argparse's SystemExit)
    exits the usual way.
    """
    configure_process()
    with scratch_dir():
        code = main()
    with suppress(OSError):  # a reader that went away cannot be told more
        sys.stdout.flush()
    with suppress(OSError):
        sys.stderr.flush()
    os._exit(code)


def _main(args: argparse.Namespace) -> int:
    run = _Run()
    handlers: dict[str, Callable[[], Awaitable[int]]] = {
        "demo": lambda: _demo(args),
        "compact": lambda: _compact(args, run),
        "verify": lambda: _verify(args),
        "delete": lambda: _delete(args),
        "enable-dv": lambda: _enable_dv(args),
        "vacuum": lambda: _vacuum(args),
        "checkpoint": lambda: _checkpoint(args),
    }
    daemon_handler = daemon_commands.HANDLERS.get(args.command)
    try:
        if daemon_handler is not None:  # the daemon handles its own signals (drain, reload)
            return anyio.run(daemon_handler, args)
        return anyio.run(_until_stopped, handlers[args.command])
    except _Stopped as stop:
        if run.report is not None:  # the work was done when the signal came
            return _compacted(args, run.report)
        name = signal.Signals(stop.signum).name
        print(f"rlcd: stopped by {name}: {run.abandoned()}", file=sys.stderr)
        return 128 + stop.signum
    except RlcdError as exc:
        # an error that names its table (every TableError, a ConfigError about one table)
        # gets no second name; storage and other configuration errors name only the key
        named = getattr(exc, "table", None) is not None
        where = f"{args.table}: " if "table" in args and not named else ""
        print(f"rlcd: {where}{exc}", file=sys.stderr)
        return error_exit_code(exc)
