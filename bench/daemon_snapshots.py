"""The daemon's snapshot budget at scale (issue 40; not in CI): ``rlcd run`` over 20 tables of
100k live files each, with a ``snapshot_memory`` smaller than their snapshots together.

    python bench/daemon_snapshots.py [--tables 20] [--files 100000] [--budget-mib 400]
        [--poll 10] [--seconds 300] [--every 7] [--out FILE]

The tables are hard-linked copies, on local disk, of ``bench/snapshot.py``'s generated log of
``--files`` live files (cached in ``bench/out/snapshot-N/``; no data file exists), the first
one checkpointed at its latest version before it is copied, so that the daemon owes no
checkpoint. The policy makes no file eligible for compaction: ``min_file_size = 0`` (no file
is small, only DV purges remain) and ``max_deleted_rows_ratio = 1`` (no DV purge either), so
the daemon polls, plans and holds snapshots but never reads a data file. Vacuum is off (the
tombstones name files that do not exist) and ``min_file_age`` is 0 (no file comes of age).

While the daemon runs for ``--seconds``, the bench samples its RSS (``/proc``) every second
and scrapes ``/metrics`` 4 times a second: ``rlcd_table_snapshot_bytes`` summed over the
tables, and each table's ``rlcd_table_version``. After the warm-up (every table seen, then two
more polls) it appends a commit of 10 new files every ``--every`` seconds, in turn to one of
3 hot tables and to the next of the others (mostly released ones). A commit's time-to-notice
runs from its write to the first scrape showing its version (up to 0.25 s late), reported
apart for tables that held their snapshot and tables that had released it.

Prints RSS (min, median, max after the warm-up; the peak during it), the snapshot bytes held
against the budget, time-to-notice against the poll interval, the daemon's CPU and the load
average; writes JSON to ``bench/out/daemon_snapshots.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from daemon import cpu_seconds, rss_mib
from snapshot import OUT, _add, _commit_info, _write_commit, cached_table

from rlcd.cli.daemon_demo import DaemonProcess

HOT = 3
"""Tables that get every other commit (they stay active, so they keep their snapshots)."""
SCRAPE_S = 0.25

CONFIG = """
[daemon]
poll_interval = "{poll}s"
snapshot_memory = "{budget}MiB"
[log]
format = "json"
[metrics]
listen = "127.0.0.1:{port}"
[policy]
min_file_size = 0
max_deleted_rows_ratio = 1.0
min_file_age = "0s"
vacuum = false
[[discover]]
prefix = "{root}"
max_depth = 1
"""

_SAMPLE = re.compile(r'^(rlcd_table_version|rlcd_table_snapshot_bytes)\{table="([^"]+)"\} (\S+)$')


def prepare(root: Path, count: int, files: int) -> int:
    """``count`` tables ``t00``... under ``root``, all at the cached log's latest version and
    checkpointed there; returns that version."""
    from rlcd.delta.checkpoint_writer import write_checkpoint
    from rlcd.delta.load import load_snapshot
    from rlcd.storage import open_store

    template, manifest = cached_table(files)
    first = root / "t00"
    shutil.copytree(template, first, copy_function=os.link)

    async def checkpoint() -> None:
        async with open_store(str(first)) as store:
            await write_checkpoint(store, await load_snapshot(store))

    anyio.run(checkpoint)
    for t in range(1, count):
        shutil.copytree(first, root / f"t{t:02d}", copy_function=os.link)
    return int(manifest["latest_version"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> tuple[dict[str, int], dict[str, int]]:
    """Each table's (by its folder's name) version and snapshot bytes, from ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    versions: dict[str, int] = {}
    held: dict[str, int] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            into = versions if m[1] == "rlcd_table_version" else held
            into[m[2].rstrip("/").rsplit("/", 1)[-1]] = int(float(m[3]))
    return versions, held


@dataclass
class Commit:
    table: str
    version: int
    written: float
    held: bool
    noticed: float | None = None


class Writer:
    """Appends commits of new (dataless) files to the tables, put-if-absent as a writer."""

    def __init__(self, root: Path, tables: list[str], version: int, files: int) -> None:
        self.root, self.files = root, files
        self.versions = dict.fromkeys(tables, version)
        self.hot, self.cold = tables[:HOT], tables[HOT:]
        self.fresh = 2 * files  # file indexes past the generator's
        self.rng = random.Random(40)
        self.count = 0

    def next_table(self) -> str:
        k, self.count = self.count, self.count + 1
        group = self.hot if k % 2 == 0 else self.cold
        return group[(k // 2) % len(group)]

    def commit(self, table: str) -> int:
        version = self.versions[table] + 1
        now_ms = int(time.time() * 1000)
        adds = []
        for _ in range(10):
            adds.append(
                {"add": _add(self.fresh, self.files, self.rng) | {"modificationTime": now_ms}}
            )
            self.fresh += 1
        tmp = self.root / f".commit-{table}.tmp"
        _write_commit(tmp, _commit_info("WRITE"), adds)
        os.link(tmp, self.root / table / "_delta_log" / f"{version:020d}.json")
        tmp.unlink()
        self.versions[table] = version
        return version


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "min": round(min(values), 2),
        "median": round(statistics.median(values), 2),
        "max": round(max(values), 2),
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rlcd-dbudget-") as tmp:
        root = Path(tmp, "tables")
        root.mkdir()
        started = time.monotonic()
        version = prepare(root, args.tables, args.files)
        tables = sorted(p.name for p in root.iterdir())
        print(f"{args.tables} tables of {args.files} files in {time.monotonic() - started:.0f}s")
        port = free_port()
        config = Path(tmp, "rlcd.toml")
        config.write_text(
            CONFIG.format(poll=args.poll, budget=args.budget_mib, port=port, root=root)
        )
        daemon = DaemonProcess(config, env={}, log=Path(tmp, "daemon.log"))
        pid = daemon.process.pid
        writer = Writer(root, tables, version, args.files)
        t0 = time.monotonic()
        rss: list[tuple[float, float]] = []
        held_sum: list[tuple[float, int]] = []
        commits: list[Commit] = []
        held: dict[str, int] = {}
        warm: float | None = None
        next_rss = next_commit = 0.0
        try:
            while (now := time.monotonic() - t0) < args.seconds:
                if now >= next_rss:
                    rss.append((now, rss_mib(pid)))
                    next_rss = now + 1.0
                try:
                    versions, held = scrape(port)
                except OSError:
                    versions = {}  # not listening yet
                seen = time.monotonic() - t0
                if held:
                    held_sum.append((seen, sum(held.values())))
                for c in commits:
                    if c.noticed is None and versions.get(c.table, -1) >= c.version:
                        c.noticed = seen
                if warm is None and len(versions) == len(tables):
                    warm = seen + 2 * args.poll
                    next_commit = warm
                    print(f"every table seen after {seen:.0f}s; commits from {warm:.0f}s")
                if warm is not None and seen >= next_commit:
                    table = writer.next_table()
                    was_held = held.get(table, 0) > 0
                    v = writer.commit(table)
                    commits.append(Commit(table, v, time.monotonic() - t0, was_held))
                    next_commit += args.every
                time.sleep(SCRAPE_S)
            cpu = cpu_seconds(pid)
            daemon.signal(signal.SIGTERM)
            code = daemon.wait(60.0)
        finally:
            daemon.kill()
        events = daemon.events()
    warm = warm if warm is not None else args.seconds
    budget = args.budget_mib * 2**20
    after = [m for t, m in rss if t >= warm]
    held_after = [b for t, b in held_sum if t >= warm]
    notice = [c.noticed - c.written for c in commits if c.noticed is not None]
    by_kind = {
        kind: _stats(
            [c.noticed - c.written for c in commits if c.noticed is not None and c.held == h]
        )
        for kind, h in (("held", True), ("released", False))
    }
    return {
        "tables": args.tables,
        "files_per_table": args.files,
        "budget_mib": args.budget_mib,
        "poll_s": args.poll,
        "seconds": args.seconds,
        "warm_up_s": round(warm, 1),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "daemon_cpu_s": round(cpu, 1),
        "rss_mib_warm_up_peak": round(max((m for t, m in rss if t < warm), default=0), 1),
        "rss_mib_after_warm_up": _stats(after),
        "snapshot_mib_after_warm_up": _stats([b / 2**20 for b in held_after]),
        "snapshot_over_budget_scrapes": sum(1 for b in held_after if b > budget),
        "snapshot_mib_peak": round(max((b for _, b in held_sum), default=0) / 2**20, 1),
        "commits": len(commits),
        "commits_noticed": len(notice),
        "notice_s": _stats(notice),
        "notice_s_by_snapshot": by_kind,
        "notices_over_one_poll": sum(1 for n in notice if n > args.poll),
        "released": sum(1 for e in events if e.get("event") == "snapshot_released"),
        "reloaded": sum(1 for e in events if e.get("event") == "snapshot_reloaded"),
        "errors_and_warnings": sum(1 for e in events if e.get("level") in ("error", "warning")),
        "exit_code": code,
        "rss_samples": [(round(t), round(m)) for t, m in rss],
        "snapshot_samples": [(round(t, 1), round(b / 2**20)) for t, b in held_sum[::4]],
        "notices": [(c.table, c.version, c.held, round(c.written, 2), c.noticed) for c in commits],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--budget-mib", type=int, default=400)
    parser.add_argument("--poll", type=float, default=10.0, help="poll interval, seconds")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--every", type=float, default=7.0, help="seconds between commits")
    parser.add_argument("--out", type=Path, default=OUT / "daemon_snapshots.json")
    args = parser.parse_args()
    result = bench(args)
    summary = {k: v for k, v in result.items() if not k.endswith(("_samples", "notices"))}
    print(json.dumps(summary, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    ok = result["commits_noticed"] == result["commits"] and result["exit_code"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
