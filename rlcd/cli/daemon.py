"""The daemon's commands: ``rlcd run``, ``rlcd config check`` and ``rlcd status``.

Exit codes are :mod:`rlcd.cli.exit_codes`'s: a bad config raises :class:`ConfigError` (exit 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = ("add_commands", "HANDLERS")


_STATUS_EXITS = """Exit codes:
  0    every table was read (a daemon that is not reachable is no error: no last errors shown)
  2    bad configuration
  3    a table cannot be read (corrupt log, unsupported feature)
  4    storage failed for a table (4 wins over 3; each table's line says what failed)
"""


def add_commands(sub: Any) -> None:
    """Add ``run``, ``config check`` and ``status`` to the ``rlcd`` subcommands."""
    run = sub.add_parser(
        "run",
        help="run the daemon: keep the config's tables compact",
        description="Run the daemon: poll the tables the config names or discovers, compact "
        "each when it is due, serve /metrics and /healthz; SIGHUP reloads the config, SIGTERM "
        "drains the bins in flight and exits 0.",
    )
    run.add_argument("--config", required=True, help="the TOML config (config/rlcd.toml)")
    run.add_argument(
        "--once",
        action="store_true",
        help="one pass over the tables, then exit: 0, or the worst failing table's exit code "
        "(4 storage failed, 3 table unreadable, 1 another failure)",
    )
    run.add_argument("--instance", type=int, help="this shard's instance (overrides the file)")

    config = sub.add_parser(
        "config",
        help="work with the daemon's config file",
        description="Work with the daemon's TOML config file.",
    )
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser(
        "check",
        help="validate; print the effective policies",
        description="Validate the config file and print each table's and discover prefix's "
        "effective policy. A bad file exits 2, naming every bad key with its file and key path.",
    )
    check.add_argument("path", help="the TOML config")

    status = sub.add_parser(
        "status",
        help="per table: version, files, backlog, last run",
        description="Per table of the config (named or discovered): its version, files and "
        "backlog, rlcd's last compaction, and the running daemon's last error for it (from "
        "its /healthz).",
        epilog=_STATUS_EXITS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    status.add_argument("--config", required=True, help="the TOML config")
    status.add_argument("--instance", type=int, help="the shard whose endpoint to ask")


async def _run(args: argparse.Namespace) -> int:
    """0, or after ``--once`` the worst of the failing tables' exit codes (4 over 3 over 1)."""
    from rlcd.cli.exit_codes import worst_exit_code
    from rlcd.daemon.app import run_daemon

    return worst_exit_code(await run_daemon(args.config, once=args.once, instance=args.instance))


async def _config(args: argparse.Namespace) -> int:
    from rlcd.cli.status import check_config

    return await check_config(args)


async def _status(args: argparse.Namespace) -> int:
    from rlcd.cli.status import print_status

    return await print_status(args)


HANDLERS: Mapping[str, Callable[[argparse.Namespace], Awaitable[int]]] = {
    "run": _run,
    "config": _config,
    "status": _status,
}
