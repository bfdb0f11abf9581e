"""The daemon at scale (not in CI): ``rlcd run`` over 200 small tables on moto for a few minutes.

Measures, from outside the daemon process: every table converges (nothing due), the worst
time-to-compact (daemon start to a table's first commit), the daemon's CPU while every table
is idle (an idle poll is one LIST per table), and its RSS sampled over the run (flat after the
first cycle means no growth per poll). Prints the figures and writes them as JSON
(``bench/out/daemon.json``, like the other benches).

    python bench/daemon.py [--tables 200] [--files 5] [--idle 90] [--poll 2s] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import boto3
import deltalake

from rlcd.cli.daemon_demo import (
    DaemonProcess,
    TableSpec,
    Workload,
    moto_server,
    rows,
    wait_converged,
)

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def make_tables(local: Path, count: int, files: int) -> None:
    for t in range(count):
        for f in range(files):
            ids = list(range(f * 50, f * 50 + 50))
            spec = TableSpec(f"t{t:03d}")
            deltalake.write_deltalake(str(local / spec.name), rows(spec, ids), mode="append")


def upload(endpoint: str, bucket: str, local: Path) -> None:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    for p in sorted(local.rglob("*")):
        if p.is_file():
            client.upload_file(str(p), bucket, f"bench/{p.relative_to(local)}")


CONFIG = """
[daemon]
poll_interval = "{poll}"
bins_in_flight = 4
[s3]
endpoint_url = "{endpoint}"
region = "us-east-1"
addressing_style = "path"
[log]
format = "json"
[metrics]
listen = ""
[policy]
min_small_files = 2
min_interval = "0s"
min_file_age = "0s"
[[discover]]
prefix = "s3://{bucket}/bench"
interval = "10m"
"""


def first_commits(events: list[dict[str, Any]], t0: float) -> dict[str, float]:
    """Seconds from ``t0`` to each table's first committed compaction, from the daemon's log."""
    found: dict[str, float] = {}
    for e in events:
        if e.get("event") == "compaction_finished" and e.get("version") is not None:
            stamp = dt.datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
            found.setdefault(e["table"], stamp - t0)
    return found


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with moto_server() as endpoint, tempfile.TemporaryDirectory(prefix="rlcd-bench-") as tmp:
        bucket = f"rlcd-bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        started = time.monotonic()
        await anyio.to_thread.run_sync(make_tables, Path(tmp, "local"), args.tables, args.files)
        await anyio.to_thread.run_sync(upload, endpoint, bucket, Path(tmp, "local"))
        print(f"{args.tables} tables of {args.files} files in {time.monotonic() - started:.0f}s")
        specs = [TableSpec(f"t{t:03d}") for t in range(args.tables)]
        w = Workload(bucket, endpoint, specs, prefix="bench")
        config = Path(tmp, "rlcd.toml")
        await anyio.Path(config).write_text(
            CONFIG.format(poll=args.poll, endpoint=endpoint, bucket=bucket)
        )
        daemon = DaemonProcess(config, env={}, log=Path(tmp, "daemon.log"))
        pid = daemon.process.pid
        t0 = time.time()
        rss: list[tuple[float, float]] = []

        async def sample() -> None:
            while True:
                rss.append((time.time() - t0, rss_mib(pid)))
                await anyio.sleep(5)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                # judged from the daemon's log while it works (reading 200 tables from the
                # moto server in this process would slow the daemon down), then checked once
                with anyio.move_on_after(args.converge):
                    while True:
                        if len(first_commits(daemon.events(), t0)) >= args.tables:
                            break
                        await anyio.sleep(2)
                converged = await wait_converged(w, config, within_s=180)
                converged_s = time.time() - t0
                print(f"converged: {converged} after {converged_s:.0f}s; idle {args.idle}s")
                await anyio.sleep(5)  # let the last polls after the commits settle
                cpu_before, idle_start = cpu_seconds(pid), time.monotonic()
                await anyio.sleep(args.idle)
                idle_cpu = (cpu_seconds(pid) - cpu_before) / (time.monotonic() - idle_start)
                tg.cancel_scope.cancel()
            daemon.signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(daemon.wait, 60.0)
        finally:
            daemon.kill()
        events = daemon.events()
        first_commit = first_commits(events, t0)
        for s in specs:
            w.expected[s.name] = collections.Counter(range(args.files * 50))
        correct = sum(1 for s in specs if w.check(s))
        after_first = [m for t, m in rss if t >= converged_s]
        return {
            "tables": args.tables,
            "files_per_table": args.files,
            "poll_interval": args.poll,
            "converged": converged,
            "converged_s": round(converged_s, 1),
            "tables_compacted": len(first_commit),
            "tables_correct": correct,
            "worst_time_to_compact_s": round(max(first_commit.values(), default=-1), 1),
            "median_time_to_compact_s": round(
                sorted(first_commit.values())[len(first_commit) // 2] if first_commit else -1, 1
            ),
            "idle_cpu_percent_of_one_core": round(100 * idle_cpu, 2),
            "rss_mib_peak": round(max(m for _, m in rss), 1),
            "rss_mib_after_convergence_first": round(after_first[0], 1) if after_first else None,
            "rss_mib_end": round(rss[-1][1], 1),
            "rss_samples": [(round(t), round(m, 1)) for t, m in rss],
            "exit_code": code,
            "errors": sum(1 for e in events if e.get("level") == "error"),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tables", type=int, default=200)
    parser.add_argument("--files", type=int, default=5)
    parser.add_argument("--idle", type=float, default=90.0)
    parser.add_argument("--converge", type=float, default=300.0)
    parser.add_argument("--poll", default="2s")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "daemon.json")
    args = parser.parse_args()
    result = anyio.run(bench, args)
    summary = {k: v for k, v in result.items() if k != "rss_samples"}
    print(json.dumps(summary, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0 if result["converged"] and result["tables_correct"] == args.tables else 1


if __name__ == "__main__":
    sys.exit(main())
