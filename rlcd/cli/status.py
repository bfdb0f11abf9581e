"""``rlcd config check`` and ``rlcd status``: what the daemon's config makes of each table.

Imported only by those commands (it loads the compaction stack and the S3 client).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, TextIO

import anyio
import anyio.to_thread

from rlcd.cli.exit_codes import error_exit_code
from rlcd.compaction.compact import plan_table
from rlcd.compaction.words import count
from rlcd.daemon.config import Settings, load_settings, render_policies, with_instance
from rlcd.daemon.metrics import Health, RunRecord, TableHealth, VacuumRecord
from rlcd.delta.actions import CommitInfo
from rlcd.delta.load import load_snapshot, newest_checkpoint, read_commit
from rlcd.errors import RlcdError
from rlcd.storage import LocalStore, S3Client
from rlcd.storage.base import ObjectStore
from rlcd.storage.uri import TableUri

__all__ = ("check_config", "print_status")

_HISTORY = 50
"""Commits read back from the latest when looking for rlcd's last compaction."""


async def check_config(args: argparse.Namespace) -> int:
    """Validate the file; print each table's effective policy."""
    print(render_policies(load_settings(args.path)))
    return 0


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.config)
    return settings if args.instance is None else with_instance(settings, args.instance)


async def print_status(args: argparse.Namespace) -> int:
    """Per table: version, files, backlog, last rlcd compaction, the newest checkpoint and its
    lag, the daemon's last error, its last run (each bin's outcome), its last few runs, the
    files it quarantined and its last vacuum.

    Returns the exit code of the worst table that cannot be read (``rlcd status --help``): a
    storage failure's 4 over an unreadable table's 3; 0 when every table was read.
    """
    settings = _settings(args)
    daemon = await anyio.to_thread.run_sync(_daemon_tables, settings)
    code = 0
    async with S3Client(settings.s3) as client:
        uris = await _tables(settings, client)
        for uri in uris:
            store: ObjectStore = client.store(uri) if uri.is_s3 else LocalStore(uri.prefix)
            status = await _table_status(settings, uri, store)
            code = max(code, status.get("exit", 0))
            _print_status(str(uri), status, daemon, sys.stdout)
    if daemon is None:
        print("daemon: not reachable (no last errors or runs shown)")
    return code


async def _tables(settings: Settings, client: S3Client) -> list[TableUri]:
    from rlcd.daemon.discover import EMPTY_PREFIX, discover_tables

    found = {str(t.uri): t.uri for t in settings.tables}
    for d in settings.discover:
        prefix: ObjectStore = (
            client.store(d.prefix) if d.prefix.is_s3 else LocalStore(d.prefix.prefix)
        )
        discovered = await discover_tables(prefix, d)
        if discovered.empty:
            print(f"{d.key} {d.prefix}: {EMPTY_PREFIX}", file=sys.stdout)
        for uri in discovered.tables:
            found.setdefault(str(uri), uri)
    return [found[k] for k in sorted(found)]


async def _table_status(settings: Settings, uri: TableUri, store: ObjectStore) -> dict[str, Any]:
    try:
        snapshot = await load_snapshot(store)
        policy = settings.policy_for(uri)
        age_ms = int(policy.min_file_age_s * 1000)
        before = int(time.time() * 1000) - age_ms if age_ms else None
        _, bins = plan_table(snapshot, policy.compaction, before_ms=before)
        last = await _last_compaction(store, snapshot.version)
        checkpoint = await newest_checkpoint(store)
    except RlcdError as exc:
        return {"error": str(exc), "exit": error_exit_code(exc)}
    return {
        "version": snapshot.version,
        "files": snapshot.num_files,
        "small_files": sum(b.num_sources for b in bins),
        "bytes_to_compact": sum(b.estimated_bytes for b in bins),
        "last_compaction": last,
        "checkpoint": checkpoint,
    }


async def _last_compaction(store: ObjectStore, version: int) -> str | None:
    """When rlcd last compacted the table, from the newest commits (None: not recently): its
    OPTIMIZE commits, not its deletes or property changes."""
    for v in range(version, max(-1, version - _HISTORY), -1):
        info = next(
            (a for a in await read_commit(store, v, table=store.root) if isinstance(a, CommitInfo)),
            None,
        )
        if (
            info is None
            or info.operation != "OPTIMIZE"
            or not str(info.extra.get("engineInfo", "")).startswith("rlcd/")
        ):
            continue
        when = info.in_commit_timestamp or info.timestamp
        stamp = dt.datetime.fromtimestamp(when / 1000, dt.UTC).isoformat() if when else "?"
        return f"version {v} at {stamp}"
    return None


def _daemon_tables(settings: Settings) -> Mapping[str, TableHealth] | None:
    """Each table as the running daemon's /healthz has it (None: not reachable)."""
    listen = settings.metrics.listen
    if listen is None:
        return None
    host, port = listen
    try:
        url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/healthz"
        with urllib.request.urlopen(url, timeout=2) as answer:
            body = json.load(answer)
        health = Health.from_json(body)
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return health.tables


def _print_status(
    name: str, status: Mapping[str, Any], daemon: Mapping[str, TableHealth] | None, out: TextIO
) -> None:
    print(name, file=out)
    if "error" in status:
        print(f"  cannot read: {status['error']}", file=out)
        return
    print(
        f"  version {status['version']}, {count(status['files'], 'file')}, "
        f"{status['small_files']} to compact ({status['bytes_to_compact']} bytes)",
        file=out,
    )
    print(f"  last rlcd compaction: {status['last_compaction'] or 'none recently'}", file=out)
    print(f"  newest checkpoint: {_checkpoint_line(status)}", file=out)
    if daemon is None:
        return
    health = daemon.get(name, TableHealth())
    print(f"  last error: {health.last_error or 'none'}", file=out)
    summary, *bins = health.last_run or ("none since the daemon started",)
    print(f"  daemon's last run: {summary}", file=out)
    for line in bins:
        print(f"    {line}", file=out)
    if health.history:
        print(f"  daemon's last {len(health.history)} runs, newest first:", file=out)
        for run in reversed(health.history):
            print(f"    {_run_line(run)}", file=out)
    print(f"  quarantined files: {len(health.quarantined) or 'none'}", file=out)
    for q in health.quarantined:
        dv = f" (DV {q.dv})" if q.dv else ""
        until = "a reload" if q.until is None else _when(q.until)
        print(
            f"    {q.path}{dv}: {q.failures} failed reads, quarantined since {_when(q.since)} "
            f"until {until}",
            file=out,
        )
        print(f"      {q.error}", file=out)
    print(f"  daemon's last vacuum: {_vacuum_line(health.last_vacuum)}", file=out)
    print(f"  daemon's snapshot: {_snapshot_line(health)}", file=out)


def _checkpoint_line(status: Mapping[str, Any]) -> str:
    """The newest checkpoint and how many versions it lags the table's."""
    checkpoint, version = status["checkpoint"], status["version"]
    if checkpoint is None:
        return "none (readers replay every commit)"
    return f"version {checkpoint} ({count(version - checkpoint, 'version')} behind)"


def _when(unix_s: float) -> str:
    return dt.datetime.fromtimestamp(unix_s, dt.UTC).isoformat(timespec="seconds")


def _vacuum_line(vacuum: VacuumRecord | None) -> str:
    """The daemon's last vacuum of a table in words."""
    if vacuum is None:
        return "none since the daemon started"
    if vacuum.error is not None:
        return f"{_when(vacuum.when)} {vacuum.mode}: {vacuum.error}"
    return (
        f"{_when(vacuum.when)} {vacuum.mode}: {vacuum.files} files, {vacuum.bytes} bytes "
        f"deleted (version {vacuum.version})"
    )


def _snapshot_line(health: TableHealth) -> str:
    """What the daemon holds of a table between polls."""
    if health.snapshot_released:
        return "released while idle (loaded again when the table changes)"
    if not health.snapshot_bytes:
        return "none held"
    return f"{health.snapshot_bytes / 2**20:.1f} MiB held"


def _run_line(run: RunRecord) -> str:
    """One run of the history in words."""
    if run.error is not None:
        bins = f"{run.bins_committed} of {run.bins} bins: " if run.bins else ""
        return f"{_when(run.when)} failed: {bins}{run.error}"
    return (
        f"{_when(run.when)} {run.outcome}: {run.bins_committed} of {run.bins} bins, "
        f"{run.files_in} files -> {run.files_out}, {run.reconciled} reconciled"
    )
