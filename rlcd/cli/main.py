"""The ``rlcd`` command line.

Exit codes: 0 success (including "nothing to do"); 1 the work found a problem (a bin did not
commit, a verification failed); 2 bad usage or configuration; 3 the table cannot be read or
written (corrupt log, unsupported feature); 4 storage failed (refused, or still failing after
retries).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from rlcd import __version__
from rlcd.cli.report import print_compaction, print_plan, print_verify
from rlcd.daemon.logging import configure_logging
from rlcd.errors import ConfigError, RlcdError, StorageError, TableError
from rlcd.storage import S3Config, open_store

__all__ = ("main",)

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_TABLE, EXIT_STORAGE = 0, 1, 2, 3, 4
_EXIT_CODES: tuple[tuple[type[RlcdError], int], ...] = (
    (ConfigError, EXIT_USAGE),
    (TableError, EXIT_TABLE),
    (StorageError, EXIT_STORAGE),
    (RlcdError, EXIT_PROBLEM),
)


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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlcd", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--version", action="version", version=f"rlcd {__version__}")
    parser.add_argument(
        "--log-level", default="warning", choices=["debug", "info", "warning", "error"]
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="build a local demo table, compact it, verify it")
    demo.add_argument(
        "--path",
        type=Path,
        default=Path("demo-table"),
        help="where to (re)create the demo table (default: ./demo-table); a directory is "
        "only replaced if an earlier demo made it",
    )
    demo.add_argument("--files", type=int, default=24, help="small files to write (default 24)")
    demo.add_argument("--rows", type=int, default=2000, help="rows per file (default 2000)")

    compact = sub.add_parser("compact", help="compact a table's small files once")
    compact.add_argument("table", help="s3://bucket/prefix, file:///path or a local path")
    compact.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    compact.add_argument(
        "--target-size",
        help="target output size, e.g. 128MiB (default: "
        "the table's delta.targetFileSize, else 128 MiB)",
    )
    compact.add_argument(
        "--min-size", help="files below this are compacted (default: half the target)"
    )
    compact.add_argument("--where", help="partition predicate, e.g. \"date = '2026-11-30'\"")
    compact.add_argument("--max-bins", type=int, help="compact at most this many bins")
    compact.add_argument("--codec", default="zstd", help="output compression (default zstd)")
    compact.add_argument(
        "--encodings",
        help="column encodings: conservative (a dictionary while it stays small) or adaptive "
        "(chosen per column from the data); default conservative",
    )
    _add_s3_options(compact)

    verify = sub.add_parser(
        "verify",
        help="check the live files and the composition tags against storage",
        description="Check that every live file and deletion vector of the current snapshot "
        "is on storage as the log describes it (size, DV checksum and cardinality, DV rows "
        "within the file), and that every commit with composition tags still matches the data "
        "it describes. History removed by VACUUM is reported as skipped, not as a failure. "
        "Exit 0 when everything checked out, 1 when a problem was found.",
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
    _add_s3_options(verify)
    return parser


def _s3_config(args: argparse.Namespace) -> S3Config:
    return S3Config(
        endpoint_url=args.endpoint_url,
        region=args.region,
        profile=args.profile,
        addressing_style=args.addressing_style,
    )


async def _demo(args: argparse.Namespace) -> int:
    from rlcd.cli.demo import run_demo

    result = await run_demo(args.path.resolve(), files=args.files, rows=args.rows, out=sys.stdout)
    return EXIT_OK if result.ok else EXIT_PROBLEM


async def _compact(args: argparse.Namespace) -> int:
    from rlcd.cli.progress import BinProgress
    from rlcd.compaction.compact import compact_table
    from rlcd.compaction.policy import (
        ENCODINGS,
        CompactionPolicy,
        PartitionFilter,
        parse_byte_size,
    )

    try:
        sizes = {"target_file_size": parse_byte_size(args.target_size)} if args.target_size else {}
        min_size = parse_byte_size(args.min_size) if args.min_size else None
    except ValueError as exc:
        raise ConfigError(f"bad size: {exc}") from exc
    policy = CompactionPolicy(
        **sizes,
        min_file_size=min_size,
        max_bins=args.max_bins,
        partition_filter=PartitionFilter.parse(args.where) if args.where else None,
        codec=args.codec,
        encodings=args.encodings or ENCODINGS[0],
    )
    async with open_store(args.table, s3=_s3_config(args)) as store:
        progress = BinProgress(sys.stderr)
        report = await compact_table(
            store,
            policy,
            dry_run=args.dry_run,
            predicate=(args.where,) if args.where else (),
            on_plan=progress.start,
            on_bin_done=progress.advance,
        )
        progress.finish()
    if args.dry_run:
        print_plan(report, sys.stdout)
        return EXIT_OK
    print_compaction(report, sys.stdout)
    return EXIT_PROBLEM if report.failed else EXIT_OK


async def _verify(args: argparse.Namespace) -> int:
    from rlcd.compaction.verify import verify_table

    async with open_store(args.table, s3=_s3_config(args)) as store:
        report = await verify_table(store, files=not args.tags_only, tags=not args.files_only)
    code = EXIT_OK if report.ok else EXIT_PROBLEM
    print_verify(report, sys.stdout, exit_code=code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(level=args.log_level)
    handlers = {"demo": _demo, "compact": _compact, "verify": _verify}
    try:
        return anyio.run(handlers[args.command], args)
    except RlcdError as exc:
        # a table error names its table; storage and configuration errors only the key
        where = f"{args.table}: " if "table" in args and not isinstance(exc, TableError) else ""
        print(f"rlcd: {where}{exc}", file=sys.stderr)
        return next(code for kind, code in _EXIT_CODES if isinstance(exc, kind))
