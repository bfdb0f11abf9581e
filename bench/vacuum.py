"""Vacuum's rules on a big table: the daemon's ``reclaimable_bytes`` and a lite dry run (issue 40).

    .venv/bin/python bench/vacuum.py [--files 100000] [--repeat 3]

On the log ``bench/snapshot.py`` generates (cached in ``bench/out/snapshot-N/``: N live files,
3% with a DV, N/100 tombstones in the checkpoint and those of the 100 commits after it; none of
the data files exist, so a dry run's candidates are headed and not found), each run a fresh
process:

- ``reclaimable``: ``load_snapshot``, then ``reclaimable_bytes(snapshot, now)`` timed, with
  the RSS and ``Snapshot.held_bytes()`` it adds (the objects a snapshot caches count there);
- ``dry-run``: ``vacuum_table(store, mode="lite", dry_run=True)`` timed whole (its load
  included), with the process's peak RSS (``VmHWM``).

One more run of each under ``tracemalloc`` gives the peak of Python allocations (slower: its
times are not the figures). Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compact import _peak_rss_kib
from snapshot import cached_table


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(mode: str, path: str, traced: bool) -> dict[str, Any]:
    """One run of ``mode`` on the table at ``path``."""
    import anyio

    from rlcd.cli.process import configure_process

    configure_process()
    from rlcd.delta.load import load_snapshot
    from rlcd.delta.replay import Snapshot
    from rlcd.operations.vacuum import reclaimable_bytes, vacuum_table
    from rlcd.storage import open_store

    now = int(time.time() * 1000)
    out: dict[str, Any] = {"mode": mode, "traced": traced}
    if mode == "reclaimable":

        async def load() -> Snapshot:
            async with open_store(path) as store:
                return await load_snapshot(store)

        snapshot = anyio.run(load)
        rss, held = _rss_mib(), snapshot.held_bytes()
        if traced:
            tracemalloc.start()
        start = time.perf_counter()
        out["bytes"] = reclaimable_bytes(snapshot, now_ms=now)
        out["seconds"] = time.perf_counter() - start
        out["rss_added_mib"] = _rss_mib() - rss
        out["held_added_mib"] = (snapshot.held_bytes() - held) / 2**20
    else:

        async def dry_run() -> int:
            async with open_store(path) as store:
                report = await vacuum_table(store, mode="lite", dry_run=True, now_ms=now)
            return len(report.files)

        if traced:
            tracemalloc.start()
        start = time.perf_counter()
        out["files"] = anyio.run(dry_run)
        out["seconds"] = time.perf_counter() - start
    if traced:
        out["traced_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
    return out | {"peak_rss_mib": _peak_rss_kib() / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, path, traced = args.child
        print(json.dumps(child(mode, path, traced == "1")), flush=True)
        os._exit(0)  # as the rlcd command: no freeing of the snapshot object by object
    table, _ = cached_table(args.files)
    for mode in ("reclaimable", "dry-run"):
        for traced in [False] * args.repeat + [True]:
            argv = [sys.executable, __file__, "--child", mode, str(table), str(int(traced))]
            run = subprocess.run(argv, capture_output=True, text=True, check=True)
            print(run.stdout.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
