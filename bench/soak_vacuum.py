"""Vacuum soak (issue 41; not in CI): the daemon on moto beside a writer, and short-retention
vacuums beside both.

moto's S3 server, 2-3 of the demo's tables, the demo's writer (appends through ``deltalake``,
DV deletes through rlcd's writer) for ``--minutes``, the daemon compacting them (its own
vacuum on, every 30 s, with the tables' default retention), and every ``--every`` seconds a
round of ``rlcd vacuum TABLE --retain 1m --force-short-retention`` per table (``--full`` every
``--full-every`` rounds). After every vacuum, ``rlcd verify`` must exit 0 and ``deltalake``
``scan()`` must read exactly the rows the writer left (its writes to that table paused for the
check). Once, when there is something to delete, a vacuum runs through a proxy that delays
every request and is killed with SIGKILL after its ``VACUUM START`` commit, as soon as its
deletes have landed (before its ``VACUUM END``), and is rerun; the table must then verify and
read back exactly.

Every minute each table's storage (a LIST) is printed against its live bytes (live files and
their DV files), the bytes the retention keeps (the files and DV files of tombstones younger
than ``--retain``) and the log's; any live file missing from the listing is a failure. At the
end (writer stopped, daemon converged and stopped, one last full vacuum) storage must be at
most live + retained + ``_delta_log`` + ``_rlcd`` bytes. Writes the figures as JSON
(``bench/out/soak_vacuum.json``).

    python bench/soak_vacuum.py [--minutes 3] [--tables 3] [--every 20] [--full-every 3]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import boto3

sys.path.insert(0, str(Path(__file__).resolve().parent))

from s3env import LatencyProxy

from rlcd.cli.daemon_demo import (
    DEMO_CONFIG,
    DEMO_TABLES,
    DaemonProcess,
    TableSpec,
    Workload,
    bin_outcomes,
    moto_server,
    wait_converged,
)
from rlcd.daemon.logging import configure_logging
from rlcd.delta.actions import CommitInfo
from rlcd.delta.load import list_log, load_snapshot, read_commit
from rlcd.delta.log_path import LogKind
from rlcd.delta.partitions import object_key
from rlcd.errors import NotFoundError
from rlcd.operations.vacuum import parse_retain
from rlcd.storage import open_store

CONFIG = DEMO_CONFIG.replace("[[discover]]", 'vacuum = true\nvacuum_interval = "30s"\n[[discover]]')

KILL_LATENCY_MS = 300.0
"""The delay the proxy adds to each request of the vacuum that is killed: room to see its
VACUUM START commit and kill it before its VACUUM END."""


@dataclass(frozen=True, slots=True)
class Footprint:
    """One table's storage by what it holds, at one moment (bytes)."""

    storage: int
    live: int
    retained: int
    log: int
    rlcd: int
    missing_live: tuple[str, ...]

    @property
    def bound(self) -> int:
        """What storage may hold once vacuumed: what no vacuum with the retention may delete."""
        return self.live + self.retained + self.log + self.rlcd


@dataclass
class Soak:
    """The run: the writer, its per-table locks (held while a table is checked), the options
    and the counts."""

    w: Workload
    args: argparse.Namespace
    held: dict[str, anyio.Lock]
    rounds: int = 0
    vacuums: int = 0
    full_vacuums: int = 0
    files_deleted: int = 0
    bytes_deleted: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)


async def footprint(w: Workload, spec: TableSpec, retain_ms: int, since_ms: int) -> Footprint:
    """The table's footprint: a snapshot, then a LIST (a file live in the snapshot is on
    storage for at least the retention after it is removed, so it must be listed). The
    retention keeps the tombstones deleted at ``since_ms`` - ``retain_ms`` or later."""
    async with open_store(w.uri(spec), s3=w.s3) as store:
        snapshot = await load_snapshot(store)
        listed = {meta.key: meta.size async for meta in store.list("")}
    root = store.root

    def keys(path: str, dv: Any) -> list[str]:
        found = [object_key(root, path)]
        if dv is not None and dv.storage_type == "u":
            found.append(object_key(root, dv.file_path()))
        return [k for k in found if k is not None]

    live = {k for a in snapshot.files.values() for k in keys(a.path, a.deletion_vector)}
    cutoff = since_ms - retain_ms
    kept = {
        k
        for r in snapshot.tombstones.values()
        if (r.deletion_timestamp or 0) >= cutoff
        for k in keys(r.path, r.deletion_vector)
    } - live
    return Footprint(
        storage=sum(listed.values()),
        live=sum(listed.get(k, 0) for k in live),
        retained=sum(listed.get(k, 0) for k in kept),
        log=sum(s for k, s in listed.items() if k.startswith("_delta_log/")),
        rlcd=sum(s for k, s in listed.items() if k.startswith("_rlcd/")),
        missing_live=tuple(sorted(live - listed.keys())),
    )


def cli(endpoint: str, *argv: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rlcd",
        *argv,
        "--endpoint-url",
        endpoint,
        "--addressing-style",
        "path",
        "--log-format",
        "json",
        "--log-level",
        "info",
    ]


def finished(stderr: bytes) -> dict[str, Any]:
    """The ``vacuum_finished`` event of a vacuum's JSON log."""
    for line in stderr.decode(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "vacuum_finished":
            return event
    return {}


def vacuum_argv(s: Soak, spec: TableSpec, endpoint: str, *extra: str) -> list[str]:
    retain = ("--retain", s.args.retain, "--force-short-retention")
    return cli(endpoint, "vacuum", s.w.uri(spec), *retain, *extra)


async def vacuum(s: Soak, spec: TableSpec, *, full: bool) -> None:
    """One ``rlcd vacuum --retain`` of the table, then the checks."""
    argv = vacuum_argv(s, spec, s.w.endpoint, *(["--full"] * full))
    run = await anyio.run_process(argv, check=False)
    event = finished(run.stderr)
    s.vacuums += 1
    s.full_vacuums += full
    s.files_deleted += int(event.get("deleted", 0))
    s.bytes_deleted += int(event.get("bytes", 0)) if event.get("deleted") else 0
    if run.returncode != 0:
        s.failures.append(f"{spec.name}: vacuum exit {run.returncode}: {run.stderr[-500:]!r}")
    await check(s, spec)


async def check(s: Soak, spec: TableSpec) -> None:
    """``rlcd verify`` exits 0, and ``deltalake`` reads exactly the writer's rows."""
    run = await anyio.run_process(cli(s.w.endpoint, "verify", s.w.uri(spec)), check=False)
    if run.returncode != 0:
        s.failures.append(f"{spec.name}: verify exit {run.returncode}: {run.stdout[-500:]!r}")
    for attempt in range(3):  # an aborted bin's output may go between the LIST and its GET
        try:
            async with s.held[spec.name]:
                same = await anyio.to_thread.run_sync(s.w.check, spec)
            break
        except Exception as exc:  # reported after the last attempt
            if attempt == 2:
                s.failures.append(f"{spec.name}: deltalake check failed: {exc!r}")
                return
    if not same:
        s.failures.append(f"{spec.name}: deltalake rows differ from the writer's")


async def commits_since(w: Workload, spec: TableSpec, version: int) -> list[tuple[int, str]]:
    """The operations of the commits after ``version``."""
    async with open_store(w.uri(spec), s3=w.s3) as store:
        log = await list_log(store, after_version=version + 1)
        versions = sorted(p.version for p in log if p.kind is LogKind.COMMIT)
        found = []
        for v in versions:
            try:
                actions = await read_commit(store, v, table=store.root)
            except NotFoundError:
                continue
            ops = [a.operation or "" for a in actions if isinstance(a, CommitInfo)]
            found.append((v, ops[0] if ops else ""))
    return found


async def absent(s: Soak, spec: TableSpec, keys: list[str]) -> int:
    """How many of ``keys`` are no longer on storage."""
    async with open_store(s.w.uri(spec), s3=s.w.s3) as store:
        found = 0
        for key in keys:
            try:
                await store.head(key)
            except NotFoundError:
                found += 1
    return found


async def kill_mid_vacuum(s: Soak, spec: TableSpec, proxy: str) -> dict[str, Any] | None:
    """A vacuum through the slow proxy, SIGKILLed after its VACUUM START commit, as soon as
    its deletes have landed (before its VACUUM END), then rerun; None when there is nothing
    to delete yet (tried again next round)."""
    w = s.w
    dry = await anyio.run_process(vacuum_argv(s, spec, w.endpoint, "--dry-run"), check=False)
    lines = dry.stdout.decode().splitlines()
    candidates = [line.strip() for line in lines if line.startswith("  ")]
    if not candidates:
        return None
    async with open_store(w.uri(spec), s3=w.s3) as store:
        seen = max(p.version for p in await list_log(store))
    process = await anyio.open_process(vacuum_argv(s, spec, proxy))
    start = None
    with anyio.move_on_after(120):
        while start is None and process.returncode is None:
            for v, op in await commits_since(w, spec, seen):
                seen = v
                start = v if op == "VACUUM START" else start
            await anyio.sleep(0.02)
    with anyio.move_on_after(3 * KILL_LATENCY_MS / 1000):
        while start is not None:
            if await absent(s, spec, candidates[:1]):
                break
            await anyio.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    code = await process.wait()
    await process.aclose()
    if start is None:
        s.failures.append(f"{spec.name}: no VACUUM START seen (exit {code})")
        return None
    ops = [op for _, op in await commits_since(w, spec, start)]
    result = {
        "table": spec.name,
        "exit": code,
        "start_version": start,
        "files_to_delete": len(candidates),
        "deleted_before_kill": await absent(s, spec, candidates),
        "end_committed": "VACUUM END" in ops,
    }
    files_before = s.files_deleted
    await vacuum(s, spec, full=False)
    result["rerun_deleted"] = s.files_deleted - files_before
    return result


def mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    retain_ms = parse_retain(args.retain)
    samples: list[dict[str, Any]] = []
    kill: dict[str, Any] | None = None
    with moto_server() as endpoint, tempfile.TemporaryDirectory(prefix="rlcd-soak-") as tmp:
        proxy = LatencyProxy(urlsplit(endpoint).port or 0, KILL_LATENCY_MS)
        proxy.start()
        bucket = f"rlcd-soak-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        w = Workload(bucket, endpoint, DEMO_TABLES[: args.tables])
        s = Soak(w, args, {spec.name: anyio.Lock() for spec in w.specs})
        for spec in w.specs:
            for _ in range(args.files):
                await w.append(spec)
        config = Path(tmp, "rlcd.toml")
        await anyio.Path(config).write_text(CONFIG.format(endpoint=endpoint, bucket=bucket))
        daemon = DaemonProcess(config, env={}, log=Path(tmp, "daemon.log"))
        t0 = time.monotonic()
        seconds = args.minutes * 60

        async def sample() -> None:
            while True:
                await anyio.sleep(60)
                now = int(time.time() * 1000)
                for spec in w.specs:
                    f = await footprint(w, spec, retain_ms, now)
                    if f.missing_live:
                        s.failures.append(f"{spec.name}: live files missing {f.missing_live}")
                    samples.append(
                        {
                            "t": round(time.monotonic() - t0),
                            "table": spec.name,
                            **dataclasses.asdict(f),
                        }
                    )
                    print(
                        f"[{time.monotonic() - t0:5.0f}s] {spec.name:<7} storage "
                        f"{mib(f.storage)} MiB, live {mib(f.live)}, retained "
                        f"{mib(f.retained)}, log {mib(f.log)}, over the bound "
                        f"{mib(max(0, f.storage - f.bound))}",
                        flush=True,
                    )

        async def rounds() -> None:
            nonlocal kill
            while (due := t0 + args.every * (s.rounds + 1)) < t0 + seconds:
                await anyio.sleep(max(0.0, due - time.monotonic()))  # at most every ``--every`` s
                s.rounds += 1
                full = s.rounds % args.full_every == 0
                for spec in w.specs:
                    if kill is None and time.monotonic() - t0 > 70:
                        proxied = f"http://127.0.0.1:{proxy.port}"
                        kill = await kill_mid_vacuum(s, spec, proxied)
                        if kill is not None:
                            print(f"kill -9 mid-vacuum: {kill}", flush=True)
                            continue
                    await vacuum(s, spec, full=full)
                print(
                    f"[{time.monotonic() - t0:5.0f}s] round {s.rounds} "
                    f"({'full' if full else 'lite'}): {s.vacuums} vacuums, "
                    f"{s.files_deleted} files deleted, failures {len(s.failures)}",
                    flush=True,
                )

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                tg.start_soon(rounds)
                await w.run(seconds, pause_s=args.pause, held=s.held)
                tg.cancel_scope.cancel()  # an unfinished round is cut; the checks below cover it
            converged = await wait_converged(w, config, within_s=120)
            daemon.signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(daemon.wait, 60.0)
        finally:
            daemon.kill()
            proxy.stop()
        final = {}
        for spec in w.specs:
            since = int(time.time() * 1000)
            await vacuum(s, spec, full=True)
            f = await footprint(w, spec, retain_ms, since)
            final[spec.name] = dataclasses.asdict(f) | {"bound": f.bound}
            print(
                f"end: {spec.name:<7} storage {mib(f.storage)} MiB, bound {mib(f.bound)} "
                f"(live {mib(f.live)}, retained {mib(f.retained)}, log {mib(f.log)})"
            )
            if f.storage > f.bound or f.missing_live:
                s.failures.append(f"{spec.name}: at the end {f}")
        events = daemon.events()
    done = [e for e in events if e.get("event") == "vacuum_done"]
    warned = [e for e in events if e.get("level") in {"warning", "error"}]
    return {
        "minutes": args.minutes,
        "tables": [s.name for s in w.specs],
        "retain": args.retain,
        "appends": w.appends,
        "dv_deletes": sum(w.deletes.values()),
        "rounds": s.rounds,
        "vacuums": s.vacuums,
        "full_vacuums": s.full_vacuums,
        "files_deleted": s.files_deleted,
        "bytes_deleted": s.bytes_deleted,
        "kill": kill,
        "daemon_exit": code,
        "converged": converged,
        "daemon_compactions": sum(e.get("event") == "compaction_finished" for e in events),
        "daemon_bins": bin_outcomes(events),
        "daemon_vacuums": len(done),
        "daemon_vacuum_files": sum(int(e.get("files", 0)) for e in done),
        "daemon_warnings": dict(collections.Counter(e.get("event") for e in warned)),
        "samples": samples,
        "final": final,
        "failures": s.failures,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--tables", type=int, default=3, choices=[1, 2, 3])
    parser.add_argument("--every", type=float, default=20.0, help="seconds between rounds")
    parser.add_argument("--full-every", type=int, default=3, help="every Nth round is --full")
    parser.add_argument("--retain", default="1m")
    parser.add_argument("--files", type=int, default=20, help="appends per table before")
    parser.add_argument("--pause", type=float, default=0.3, help="writer's pause per pass")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "out" / "soak_vacuum.json"
    )
    args = parser.parse_args()
    configure_logging(level="warning")  # the writer's DV deletes log each commit at info
    result = anyio.run(soak, args)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    return 0 if not result["failures"] and result["kill"] else 1


if __name__ == "__main__":
    sys.exit(main())
