"""The daemon demo (``python3 bootstrap.py demo``): moto's S3 server on 127.0.0.1, three
generated tables with many small files (one with deletion vectors, one partitioned), a
generated config, the daemon as a subprocess and a concurrent writer (appends through
``deltalake``, deletes through rlcd's DV writer) while it runs. It prints each table before and
after (files, bytes, rows), the writer's DV deletes next to the bins the daemon committed,
reconciled and aborted, the storage each table takes before and after a vacuum that keeps no
old version (the sources compaction replaced are deleted), checks every table's rows with
``deltalake`` against what the writer left, and stops everything. The config, the daemon's log
and a copy of each table as it ends stay in one folder (moto's S3 is gone when the demo ends),
which the last line names.

It needs the demo extra (moto's server, deltalake), which ``bootstrap.py demo`` installs. The
writer, :class:`Workload`, is also what the daemon's end-to-end tests run against it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
import anyio.to_thread
import pyarrow as pa
import pyarrow.parquet as pq

from rlcd.cli.demo import fresh_demo_dir
from rlcd.compaction.summary import OUTCOMES
from rlcd.compaction.words import count
from rlcd.delta.load import load_snapshot, read_deletion_vector
from rlcd.delta.partitions import object_key
from rlcd.errors import ConcurrentModificationError
from rlcd.operations.delete import delete_rows
from rlcd.operations.vacuum import vacuum_table
from rlcd.reconcile.classify import SOURCE_COMPACTED
from rlcd.storage import S3Client, S3Config, open_store

__all__ = (
    "TableSpec",
    "Workload",
    "DaemonProcess",
    "bin_outcomes",
    "moto_server",
    "deltalake_options",
    "download_table",
    "run_daemon_demo",
    "DEMO_CONFIG",
    "DEMO_FOLDER_ENTRIES",
    "DEMO_TABLES",
    "rows",
    "wait_converged",
)

_PARTS = ("a", "b", "c")


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A generated table: its name under the bucket's prefix, and its shape."""

    name: str
    partitioned: bool = False
    dvs: bool = False


DEMO_TABLES = (
    TableSpec("events"),
    TableSpec("orders", dvs=True),
    TableSpec("clicks", partitioned=True),
)


def rows(spec: TableSpec, ids: Sequence[int]) -> pa.Table:
    """The rows of ``ids``: every column follows from the id, so a row read back is checked
    whole by its id."""
    columns: dict[str, Any] = {
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"name-{i}" for i in ids]),
        "amount": pa.array([i * 0.25 for i in ids], pa.float64()),
    }
    if spec.partitioned:
        columns["part"] = pa.array([_PARTS[i % len(_PARTS)] for i in ids])
    return pa.table(columns)


def deltalake_options(endpoint: str) -> dict[str, str]:
    """``deltalake`` storage options for the moto server (conditional puts: no lock needed)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
        "conditional_put": "etag",
    }


def download_table(endpoint: str, bucket: str, prefix: str, dest: Path) -> None:
    """Copy every object under ``prefix`` into ``dest``: delta-rs's data-file reads from moto's
    server fail here (the log reads and writes work), and a local copy outlives the server."""
    import boto3  # type: ignore[import-untyped]

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    for page in pages:
        for obj in page.get("Contents", []):
            path = dest / obj["Key"][len(prefix) + 1 :]
            path.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, obj["Key"], str(path))


def _deltalake_ids(local: Path, spec: TableSpec) -> collections.Counter[int]:
    """The table's live ids as ``deltalake`` reads it (``scan()``, which applies DVs); every
    row must be the one its id makes."""
    import deltalake

    table = pa.table(deltalake.DeltaTable(str(local)).scan().read_all())
    ids = table.column("id").to_pylist()
    expected = rows(spec, ids)
    if table.select(expected.column_names).to_pylist() != expected.to_pylist():
        raise AssertionError(f"{local}: rows differ from what their ids make")
    return collections.Counter(ids)


@dataclass
class Workload:
    """A writer of several S3 tables: appends with ``deltalake``, deletes rows of the DV tables
    through rlcd's DV writer, and remembers which ids each table must hold."""

    bucket: str
    endpoint: str
    specs: Sequence[TableSpec]
    rows_per_append: int = 20
    seed: int = 7
    prefix: str = "tables"
    expected: dict[str, collections.Counter[int]] = field(default_factory=dict)
    appends: int = 0
    deletes: collections.Counter[str] = field(default_factory=collections.Counter)
    """The DV delete commits per table."""
    _next_id: int = 0

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self.options = deltalake_options(self.endpoint)
        self.s3 = S3Config(endpoint_url=self.endpoint, region="us-east-1", addressing_style="path")
        for spec in self.specs:
            self.expected.setdefault(spec.name, collections.Counter())

    def uri(self, spec: TableSpec) -> str:
        return f"s3://{self.bucket}/{self.prefix}/{spec.name}"

    async def append(self, spec: TableSpec, count: int | None = None) -> None:
        """One append commit of new rows."""
        import deltalake

        n = count or self.rows_per_append
        ids = list(range(self._next_id, self._next_id + n))
        self._next_id += n
        config = {"delta.enableDeletionVectors": "true"} if spec.dvs else None

        def write() -> None:
            deltalake.write_deltalake(
                self.uri(spec),
                rows(spec, ids),
                mode="append",
                partition_by=["part"] if spec.partitioned else None,
                configuration=config,
                storage_options=self.options,
            )

        await anyio.to_thread.run_sync(write)
        self.expected[spec.name].update(ids)
        self.appends += 1

    async def delete(self, spec: TableSpec, rows_per_file: int = 3) -> None:
        """Delete a few live rows of one live file through a DV; a lost race is retried."""
        async with open_store(self.uri(spec), s3=self.s3) as store:
            for _ in range(20):
                snapshot = await load_snapshot(store)
                live = [a for a in snapshot.files.values() if a.num_records]
                if not live:
                    return
                add = self._random.choice(live)
                key = object_key(store.root, add.path)
                assert key is not None
                data = await store.get(key)
                ids = pq.read_table(pa.BufferReader(data), columns=["id"]).column("id")
                deleted = await read_deletion_vector(store, add, version=snapshot.version)
                free = [p for p in range(len(ids)) if p not in deleted]
                chosen = self._random.sample(free, min(rows_per_file, len(free)))
                try:
                    await delete_rows(store, snapshot, {add.path: chosen})
                except ConcurrentModificationError:
                    continue
                self.expected[spec.name].subtract(ids[p].as_py() for p in chosen)
                self.deletes[spec.name] += 1
                return

    def check(self, spec: TableSpec, copy_to: Path | None = None) -> bool:
        """Whether ``deltalake`` reads exactly the rows the writer left, from a local copy of
        the table (kept in ``copy_to``, or a temporary directory)."""
        if copy_to is None:
            with tempfile.TemporaryDirectory(prefix="rlcd-check-") as tmp:
                return self.check(spec, Path(tmp))
        download_table(self.endpoint, self.bucket, f"{self.prefix}/{spec.name}", copy_to)
        return _deltalake_ids(copy_to, spec) == +self.expected[spec.name]

    async def run(
        self, seconds: float, *, pause_s: float = 0.05, held: Mapping[str, anyio.Lock] = {}
    ) -> None:
        """Append to every table and delete from the DV tables until ``seconds`` pass; a
        table's writes hold its lock in ``held``, so a checker can see that table at rest."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for spec in self.specs:
                async with held.get(spec.name) or contextlib.nullcontext():
                    await self.append(spec)
                    if spec.dvs and self._random.random() < 0.6:
                        await self.delete(spec)
            await anyio.sleep(pause_s)


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (its endpoint URL), stopped on exit."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


class DaemonProcess:
    """``rlcd run`` as a subprocess, its JSON log lines collected from a file."""

    def __init__(self, config: Path, *, env: Mapping[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115 (open while the process runs)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rlcd", "run", "--config", str(config)],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                found.append(event)
        return found

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._out.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._out.close()


def _objects(objects: int, size: int) -> str:
    return f"{count(objects, 'object')}, {size / 1024:.1f} KiB"


def _table_line(name: str, files: int, size: int, live: int) -> str:
    return f"{name:<8} {files:>6} files {size / 1024:>9.1f} KiB {live:>7} rows"


def _change(before: tuple[int, int, int], after: tuple[int, int, int]) -> str:
    """A table's files, live bytes and rows before the daemon ran and after, on one line (the
    before figures were printed once already, when the tables were written)."""
    (files, size, live), (files_after, size_after, live_after) = before, after
    return (
        f"{files} -> {count(files_after, 'file')}, "
        f"{size / 1024:.1f} -> {size_after / 1024:.1f} KiB, {live} -> {live_after} rows"
    )


async def _describe(w: Workload, spec: TableSpec) -> tuple[int, int, int]:
    async with open_store(w.uri(spec), s3=w.s3) as store:
        snapshot = await load_snapshot(store)
    files = snapshot.files.values()
    live = sum((a.num_records or 0) - a.deleted_rows for a in files)
    return len(snapshot.files), sum(a.size for a in files), live


async def _storage(w: Workload, spec: TableSpec) -> tuple[int, int]:
    """The objects under the table's root and their bytes: what the bucket bills."""
    async with open_store(w.uri(spec), s3=w.s3) as store:
        sizes = [meta.size async for meta in store.list("")]
    return len(sizes), sum(sizes)


async def _vacuum(w: Workload, spec: TableSpec) -> int:
    """``rlcd vacuum --retain 0h --force-short-retention`` of the table, safe here only
    because no writer and no reader is left; the files it deleted."""
    async with open_store(w.uri(spec), s3=w.s3) as store:
        report = await vacuum_table(store, retain_ms=0, allow_short_retention=True)
    return report.deleted


async def wait_converged(w: Workload, config: Path, *, within_s: float) -> bool:
    """Whether every table of ``w`` converges within ``within_s`` seconds."""
    with anyio.move_on_after(within_s):
        while True:
            if await _converged(w, config):
                return True
            await anyio.sleep(0.5)
    return False


async def _converged(w: Workload, config: Path) -> bool:
    """Whether no table is due any more, by the daemon's own rule (its thresholds)."""
    from rlcd.compaction.compact import plan_table
    from rlcd.daemon.config import load_settings
    from rlcd.daemon.schedule import Backlog
    from rlcd.daemon.supervise import trigger_for
    from rlcd.storage.uri import TableUri

    settings = load_settings(config)
    async with S3Client(w.s3) as client:
        for spec in w.specs:
            uri = TableUri.parse(w.uri(spec))
            snapshot = await load_snapshot(client.store(uri))
            policy = settings.policy_for(uri)
            backlog = Backlog.of(plan_table(snapshot, policy.compaction)[1])
            if trigger_for(policy).reason(backlog) is not None:
                return False
    return True


_BIN_EVENTS = frozenset({"bin_committed", "bin_aborted", "bin_failed"})
"""The daemon's log events that each tell one bin's fate."""


def bin_outcomes(events: Iterable[Mapping[str, Any]], *, always: Collection[str] = ()) -> str:
    """The bins of the daemon's ``bin_committed``, ``bin_aborted`` and ``bin_failed`` events
    (other events are skipped) by outcome (:data:`~rlcd.compaction.summary.OUTCOMES`),
    reconciled ones with their positions, aborted ones with their reasons: ``12 committed, 1
    reconciled by mask (20 positions), 1 superseded, 1 aborted (source_rewritten)``; ``none``
    for no bins. The outcomes in ``always`` are listed at 0 too (the demo shows that nothing
    was reconciled)."""
    tally: collections.Counter[str] = collections.Counter()
    positions: collections.Counter[str] = collections.Counter()
    reasons: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for e in (e for e in events if e.get("event") in _BIN_EVENTS):
        if e["event"] == "bin_committed":
            outcome = str(e.get("decision", "committed")).replace("_", " ")
            positions[outcome] += int(e.get("remapped_positions", 0))
            positions[outcome] += int(e.get("masked_positions", 0))
        elif e["event"] == "bin_failed":
            outcome = "failed"
        else:
            reason = str(e.get("reason"))
            outcome = "superseded" if reason == SOURCE_COMPACTED else "aborted"
            reasons[outcome][reason] += 1
        tally[outcome] += 1
    parts = []
    for outcome in (o for o in OUTCOMES if tally[o] or o in always):
        reconciled = outcome.startswith("reconciled") and tally[outcome]
        notes = [count(positions[outcome], "position")] if reconciled else []
        notes += [f"{r} x{n}" if n > 1 else r for r, n in sorted(reasons[outcome].items())]
        parts.append(f"{tally[outcome]} {outcome}" + (f" ({', '.join(notes)})" if notes else ""))
    return ", ".join(parts) or "none"


DEMO_CONFIG = """\
# generated by `rlcd demo` (its moto S3 server stops when the demo ends)
[daemon]
poll_interval = "1s"
shutdown_grace = "10s"
orphan_grace = "10m"
[s3]
endpoint_url = "{endpoint}"
region = "us-east-1"
addressing_style = "path"
[log]
format = "json"
[metrics]
listen = ""
[policy]
target_file_size = "8MiB"
min_small_files = 4
min_interval = "2s"
min_file_age = "0s"
[[discover]]
prefix = "s3://{bucket}/tables"
interval = "5s"
"""
"""The demo daemon's config (``endpoint`` and ``bucket`` to fill in); the soak bench adds to it."""


DEMO_FOLDER_ENTRIES = frozenset({"rlcd.toml", "daemon.log", "tables"})
"""What the demo keeps in its folder: the config, the daemon's log, a copy of each table."""

_SHOWN = ("committed", "reconciled by remap", "reconciled by mask", "aborted")
"""The bin outcomes the summary lists even at 0, beside the writer's DV deletes."""


async def run_daemon_demo(
    out: TextIO, *, folder: Path, files: int = 30, seconds: float = 20.0
) -> bool:
    """The whole demo, its files kept in ``folder`` (recreated: only if an earlier demo made
    it); True when every table converged and reads back exactly.

    Raises:
        ConfigError: ``folder`` holds something an earlier demo did not make.
    """
    import boto3

    await anyio.to_thread.run_sync(fresh_demo_dir, folder, DEMO_FOLDER_ENTRIES, "a demo folder")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with moto_server() as endpoint:
        bucket = f"rlcd-demo-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        w = Workload(bucket, endpoint, DEMO_TABLES)
        out.write(f"moto S3 on {endpoint}, bucket {bucket}: writing {len(w.specs)} tables\n")
        for spec in w.specs:
            for _ in range(files):
                await w.append(spec)
            if spec.dvs:
                for _ in range(5):
                    await w.delete(spec)
        before = {s.name: await _describe(w, s) for s in w.specs}
        setup = w.deletes.copy()  # the DV deletes before the daemon starts race nothing
        for name, (n, size, live) in before.items():
            out.write("  before  " + _table_line(name, n, size, live) + "\n")
        config = folder / "rlcd.toml"
        config.write_text(DEMO_CONFIG.format(endpoint=endpoint, bucket=bucket))
        out.write(f"\nstarting `rlcd run --config {config}` and a writer for {seconds:g}s\n")
        daemon = DaemonProcess(config, env={}, log=folder / "daemon.log")
        try:
            await w.run(seconds)
            raced = w.deletes - setup
            out.write(f"writer done: {w.appends} appends, {raced.total()} DV deletes\n")
            converged = await wait_converged(w, config, within_s=60)
            daemon.signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(daemon.wait, 30.0)
        finally:
            daemon.kill()
        events = daemon.events()
        ok = converged and code == 0
        out.write(
            f"daemon stopped (exit {code}); {'converged' if converged else 'NOT converged'}\n\n"
        )
        for spec in w.specs:
            n, size, live = await _describe(w, spec)
            stored = await _storage(w, spec)
            deleted = await _vacuum(w, spec)
            vacuumed = await _storage(w, spec)
            mine = [e for e in events if str(e.get("table", "")).endswith("/" + spec.name)]
            runs = sum(e.get("event") == "compaction_finished" for e in mine)
            bins = bin_outcomes(mine, always=_SHOWN)
            copy = folder / "tables" / spec.name
            same = await anyio.to_thread.run_sync(w.check, spec, copy)
            ok = ok and same
            out.write(f"{spec.name}\n")
            out.write("  table   " + _change(before[spec.name], (n, size, live)) + "\n")
            out.write(
                f"  storage {_objects(*stored)}; after a vacuum with retention 0 "
                f"({count(deleted, 'file')} deleted) {_objects(*vacuumed)}\n"
            )
            out.write(f"  writer  {count(raced[spec.name], 'DV delete')} while the daemon ran\n")
            out.write(f"  daemon  {count(runs, 'run')}, bins: {bins}\n")
            verdict = "rows as written" if same else "ROWS DIFFER"
            out.write(f"  deltalake reads {copy}: {verdict}\n")
        if not ok:
            for e in events:
                if e.get("level") in {"warning", "error"}:
                    out.write(f"  daemon: {json.dumps(e)}\n")
    out.write(
        "(rows grow by the writer's appends and shrink by its deletes; a bin that lost its commit "
        "race to a delete is reconciled (remap, mask) or aborted, never wrong; the vacuum, as "
        "`rlcd vacuum --retain 0h --force-short-retention`, deletes what compaction replaced: "
        "safe here only because nothing reads or writes the tables any more, the daemon keeps "
        "each table's own retention, 7 days by default)\n"
    )
    out.write(f"\n{'all tables compacted and correct' if ok else 'DEMO FAILED'}\n")
    out.write(
        f"the config, the daemon's log (daemon.log) and the tables as they ended are in {folder}\n"
    )
    return ok
