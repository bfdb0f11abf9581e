"""The ``rlcd`` command line.

Exit codes: 0 success; 1 the work found a problem (a failed verification, a bin that aborted);
2 bad usage or configuration; 3 the table cannot be read or written (corrupt log, unsupported
feature); 4 storage failed (after retries).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from rlcd import __version__
from rlcd.errors import ConfigError, RlcdError, StorageError, TableError

__all__ = ("main",)

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_TABLE, EXIT_STORAGE = 0, 1, 2, 3, 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlcd", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"rlcd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build a local demo table and show what rlcd does with it")
    demo.add_argument(
        "--path",
        type=Path,
        default=Path("demo-table"),
        help="where to (re)create the demo table (default: ./demo-table)",
    )
    demo.add_argument("--files", type=int, default=12, help="small files to write (default 12)")
    demo.add_argument("--rows", type=int, default=500, help="rows per file (default 500)")
    return parser


async def _demo(args: argparse.Namespace) -> int:
    from rlcd.demo import run_demo

    summary = await run_demo(args.path.resolve(), files=args.files, rows=args.rows)
    print(f"demo table: {summary.path}")
    print(
        f"  version {summary.version}, {summary.files} files, "
        f"{summary.physical_rows} rows written, {summary.deleted_rows} deleted through "
        f"deletion vectors in {summary.files_with_dvs} files"
    )
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {"demo": _demo}
    try:
        return anyio.run(handlers[args.command], args)
    except ConfigError as exc:
        print(f"rlcd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TableError as exc:
        print(f"rlcd: {exc}", file=sys.stderr)
        return EXIT_TABLE
    except StorageError as exc:
        print(f"rlcd: {exc}", file=sys.stderr)
        return EXIT_STORAGE
    except RlcdError as exc:
        print(f"rlcd: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
