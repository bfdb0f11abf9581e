"""Loading a big table's snapshot, rlcd against delta-rs, by the number of live files (issue 40).

    .venv/bin/python bench/snapshot.py [--files 100000,1000000] [--repeat 3]
        [--contenders deltalake,rlcd-load,rlcd-plan,rlcd-dry-run,rlcd-dry-run-reencode]
        [--no-incremental]

For each ``--files`` N, generates (once: cached in ``bench/out/snapshot-N/``, reused while its
``manifest.json`` says the same format) the *log* of a partitioned Delta table with N live files,
none of whose data files exist:

- a classic single-file checkpoint at version ``CHECKPOINT_VERSION`` in delta-rs' own format
  (its Parquet schema and codec, and its protocol and metaData rows, taken from a checkpoint
  delta-rs writes of a small table of the same schema), written in row groups of ``BATCH``
  rows so memory stays bounded: N adds in 1,000 partitions (``date`` x ``region``), realistic
  paths, sizes, modification times, stats JSON for 5 columns, 3% of them with a deletion
  vector, and N/100 tombstones; the commits before it expired, as after a log cleanup;
- ``COMMITS_AFTER`` JSON commits after it: appends, OPTIMIZE-like rewrites (removes of old
  files and adds of new ones, ``dataChange`` false) and deletes that update files' DVs.

Every run checks the live count it loads against the generator's; right after generating, one
process also checks that delta-rs and rlcd load the same live paths.

Contenders, each run a fresh process, alternating within each repetition (as
``bench/compact.py``, whose helpers this reuses):

- ``deltalake``: ``DeltaTable(path)`` and ``get_add_actions(flatten=True)``, rows counted;
- ``rlcd-load``: ``rlcd.delta.load.load_snapshot``, whose live adds are an Arrow table as
  delta-rs' are (rows counted);
- ``rlcd-plan``: the same load, then planning it with the default policy
  (:func:`rlcd.compaction.compact.plan_table`), timed apart (``plan_seconds``);
- ``rlcd-dry-run``: ``python -m rlcd compact --dry-run PATH``, the command as a user runs it
  (loading and planning need no data file; the orphan sweep's listing finds none; the copy
  plan's footer reads all fail, there being no data file);
- ``rlcd-dry-run-reencode``: the same with ``--rewrite reencode``: load, plan and report, no
  footer read.

Per run: the whole process's wall time and CPU (start-up included), the load's own time after
the imports (not known apart for the command), and the peak RSS (the child's ``VmHWM``). The
library children end with ``os._exit``, as the rlcd command does: none pays for freeing its
snapshot object by object. Ratios are medians of the per-repetition ratios rlcd / delta-rs.

The incremental case (unless ``--no-incremental``), one process per library per repetition:
a full load at ``CHECKPOINT_VERSION + INCREMENT`` (timed), then a load at the checkpoint's
version and an update by the ``INCREMENT`` commits after it (each timed): rlcd
``load_snapshot(version=...)`` then ``advance_snapshot`` over a listing of the log, delta-rs
``DeltaTable(path, version=...)`` then ``load_as_version``. The update is reported against the
full load. Both run on a view of the log as it stood at ``CHECKPOINT_VERSION + INCREMENT``
(hard links to its files up to that version, :func:`log_view`): a reader that holds a snapshot
and polls finds only the commits made since, where the whole log would list (and, on disk,
stat) the ``COMMITS_AFTER - INCREMENT`` commits after the target too.

Writes JSON to ``bench/out/snapshot.json``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compact import _COMMAND, _peak_rss_kib, _stolen_seconds

FORMAT = 1
"""The generated log's format: a cached log of another format is generated again."""
CHECKPOINT_VERSION = 1000
COMMITS_AFTER = 100
INCREMENT = 10
BATCH = 50_000
DATES, REGIONS = 100, ("af", "ap", "ca", "cn", "eu", "il", "me", "mx", "sa", "us")
DV_SHARE = 0.03
OPTIMIZE_EVERY, OPTIMIZE_REMOVES, OPTIMIZE_ADDS = 10, 100, 5
DELETE_EVERY, DELETE_FILES = 5, 20
APPENDS = 10
CONTENDERS = ("deltalake", "rlcd-load", "rlcd-plan", "rlcd-dry-run", "rlcd-dry-run-reencode")
INCREMENTAL = ("deltalake", "rlcd-load")
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
OUT = Path(__file__).resolve().parent / "out"


# --- the log ----------------------------------------------------------------------------------


def _template(where: Path) -> tuple[Any, list[dict[str, Any]], str]:
    """delta-rs' checkpoint of a small table of the bench's schema, with DVs enabled: its Parquet
    schema, its non-file rows (protocol, metaData) and its codec."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("amount", pa.float64()),
            ("name", pa.string()),
            ("qty", pa.int32()),
            ("date", pa.string()),
            ("region", pa.string()),
        ]
    )
    config = {"delta.enableDeletionVectors": "true"}
    DeltaTable.create(str(where), schema, partition_by=["date", "region"], configuration=config)
    rng = random.Random(0)
    add = _add(0, 1, rng) | {"deletionVector": _dv(rng, 2)}
    _write_commit(where / "_delta_log" / f"{1:020d}.json", _commit_info("WRITE"), [{"add": add}])
    DeltaTable(str(where)).create_checkpoint()
    checkpoint = pq.ParquetFile(where / "_delta_log" / f"{1:020d}.checkpoint.parquet")
    rows = [r for r in checkpoint.read().to_pylist() if r["add"] is None and r["remove"] is None]
    codec = checkpoint.metadata.row_group(0).column(0).compression
    return checkpoint.schema_arrow, rows, "none" if codec == "UNCOMPRESSED" else codec.lower()


def _add(i: int, n: int, rng: random.Random) -> dict[str, Any]:
    """Live file ``i`` of ``n``: written in date order, the regions in turn."""
    day = date(2026, 1, 1) + timedelta(days=i * DATES // n)
    region = REGIONS[i % len(REGIONS)]
    rows = rng.randint(1_000, 400_000)
    start = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(
        seconds=rng.randint(0, 80_000)
    )
    end = start + timedelta(seconds=rng.randint(1, 6_000))
    low = rng.randint(0, 900_000)
    stats = {
        "numRecords": rows,
        "minValues": {
            "id": i * 1_000_000,
            "ts": start.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "amount": round(rng.uniform(0, 10), 2),
            "name": f"customer-{low:06d}",
            "qty": 1,
        },
        "maxValues": {
            "id": i * 1_000_000 + rows - 1,
            "ts": end.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "amount": round(rng.uniform(1_000, 10_000), 2),
            "name": f"customer-{low + rng.randint(1, 99_999):06d}",
            "qty": rng.randint(2, 100),
        },
        "nullCount": {
            "id": 0,
            "ts": 0,
            "amount": rng.randint(0, rows // 100),
            "name": rng.randint(0, rows // 50),
            "qty": 0,
        },
    }
    uuid = f"{rng.getrandbits(128):032x}"
    uuid = f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"
    add: dict[str, Any] = {
        "path": f"date={day}/region={region}/part-{i % 100_000:05d}-{uuid}-c000.zstd.parquet",
        "partitionValues": {"date": str(day), "region": region},
        "size": rows * 37 + rng.randint(0, 65_536),
        "modificationTime": EPOCH_MS + i * 1_000,
        "dataChange": True,
        "stats": json.dumps(stats, separators=(",", ":")),
    }
    if rng.random() < DV_SHARE:
        add["deletionVector"] = _dv(rng, rows // 100 + 1)
    return add


def _dv(rng: random.Random, cardinality: int) -> dict[str, Any]:
    """A descriptor of a DV in a UUID-named file (the file itself is not written)."""
    from rlcd.delta.dv._z85 import z85_encode

    return {
        "storageType": "u",
        "pathOrInlineDv": z85_encode(rng.randbytes(16)),
        "offset": 1,
        "sizeInBytes": 34 + cardinality // 8,
        "cardinality": cardinality,
    }


def _remove(add: dict[str, Any], when_ms: int, *, data_change: bool) -> dict[str, Any]:
    """The remove of a live ``add``, with its DV (a remove must name the live file's key)."""
    keys = ("path", "partitionValues", "size", "deletionVector")
    remove = {k: add[k] for k in keys if k in add}
    return remove | {
        "deletionTimestamp": when_ms,
        "dataChange": data_change,
        "extendedFileMetadata": True,
    }


def _commit_info(operation: str) -> dict[str, Any]:
    return {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "clientVersion": "delta-rs.py-1.6.6",
        }
    }


def _write_commit(path: Path, info: dict[str, Any], actions: list[dict[str, Any]]) -> None:
    lines = [json.dumps(a, separators=(",", ":")) for a in (info, *actions)]
    path.write_text("\n".join(lines) + "\n")


def _checkpoint_rows(
    n: int, rng: random.Random, keep: set[int]
) -> Iterator[tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]]:
    """The checkpoint's add and tombstone rows, ``BATCH`` at a time, with the adds of the files
    in ``keep`` (which the commits after it change) by index."""
    for first in range(0, n, BATCH):
        rows, kept = [], {}
        for i in range(first, min(n, first + BATCH)):
            add = _add(i, n, rng)
            rows.append({"add": add})
            if i in keep:
                kept[i] = add
        for t in range(first // 100, min(n, first + BATCH) // 100):
            # an OPTIMIZE's removes, still within the retention period
            gone = _add(t * 100, n, rng)
            gone["path"] = f"{gone['path'].rsplit('/', 1)[0]}/part-old-{t:07d}.parquet"
            rows.append({"remove": _remove(gone, EPOCH_MS + t, data_change=False)})
        yield rows, kept


def generate(table: Path, n: int) -> dict[str, Any]:
    """The log of ``table`` (see the module docstring); returns the expected live counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(prefix="rlcd-snapshot-template-") as tmp:
        schema, others, codec = _template(Path(tmp) / "t")
    log = table / "_delta_log"
    log.mkdir(parents=True)
    optimizes = COMMITS_AFTER // OPTIMIZE_EVERY
    removed = list(range(optimizes * OPTIMIZE_REMOVES))
    dv_updated = list(range(n // 2, n // 2 + COMMITS_AFTER // DELETE_EVERY * DELETE_FILES))
    last = list(range(n - 100, n))  # commit CHECKPOINT_VERSION's own adds
    if n < 2 * (len(removed) + len(dv_updated) + len(last)):
        raise SystemExit(f"--files {n}: too few for the commits after the checkpoint")
    rng = random.Random(n)
    adds: dict[int, dict[str, Any]] = {}
    checkpoint = log / f"{CHECKPOINT_VERSION:020d}.checkpoint.parquet"
    rows_written = 0
    with pq.ParquetWriter(checkpoint, schema, compression=codec) as writer:
        for rows, kept in _checkpoint_rows(n, rng, {*removed, *dv_updated, *last}):
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            rows_written += len(rows)
            adds.update(kept)
        writer.write_table(pa.Table.from_pylist(others, schema=schema))
        rows_written += len(others)
    hint = {
        "version": CHECKPOINT_VERSION,
        "size": rows_written,
        "sizeInBytes": checkpoint.stat().st_size,
        "numOfAddFiles": n,
    }
    (log / "_last_checkpoint").write_text(json.dumps(hint, separators=(",", ":")))
    _write_commit(
        log / f"{CHECKPOINT_VERSION:020d}.json",
        _commit_info("WRITE"),
        [{"add": adds[i]} for i in last],
    )
    live = {CHECKPOINT_VERSION: n}
    count, fresh = n, n + n // 100 + 1
    for k in range(1, COMMITS_AFTER + 1):
        when = EPOCH_MS + (n + k) * 1_000
        actions: list[dict[str, Any]] = []
        if k % OPTIMIZE_EVERY == 0:
            info = _commit_info("OPTIMIZE")
            for i in removed[:OPTIMIZE_REMOVES]:
                actions.append({"remove": _remove(adds[i], when, data_change=False)})
            del removed[:OPTIMIZE_REMOVES]
            for _ in range(OPTIMIZE_ADDS):
                actions.append({"add": _add(fresh, n, rng) | {"dataChange": False}})
                fresh += 1
            count += OPTIMIZE_ADDS - OPTIMIZE_REMOVES
        elif k % DELETE_EVERY == 0:
            info = _commit_info("DELETE")
            for i in dv_updated[:DELETE_FILES]:
                old = adds[i]
                actions.append({"remove": _remove(old, when, data_change=True)})
                stats = json.loads(old["stats"])
                dv = _dv(rng, stats["numRecords"] // 10)
                actions.append({"add": old | {"deletionVector": dv, "modificationTime": when}})
            del dv_updated[:DELETE_FILES]
        else:
            info = _commit_info("WRITE")
            for _ in range(APPENDS):
                actions.append({"add": _add(fresh, n, rng)})
                fresh += 1
            count += APPENDS
        _write_commit(log / f"{CHECKPOINT_VERSION + k:020d}.json", info, actions)
        live[CHECKPOINT_VERSION + k] = count
    return {
        "checkpoint_version": CHECKPOINT_VERSION,
        "latest_version": CHECKPOINT_VERSION + COMMITS_AFTER,
        "live": {str(v): c for v, c in live.items()},
        "checkpoint_bytes": checkpoint.stat().st_size,
        "checkpoint_rows": rows_written,
        "codec": codec,
    }


def cached_table(n: int) -> tuple[Path, dict[str, Any]]:
    """The table of ``n`` files under ``bench/out/snapshot-N/``, generated when absent (or of
    another format) and then checked."""
    where = OUT / f"snapshot-{n}"
    manifest_path = where / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("format") == FORMAT:
            print(f"{n} files: cached in {where}", flush=True)
            return where / "table", manifest
    if where.exists():
        shutil.rmtree(where)
    t0 = time.perf_counter()
    manifest = generate(where / "table", n) | {"format": FORMAT, "files": n}
    manifest["generated_seconds"] = time.perf_counter() - t0
    print(
        f"{n} files: generated in {manifest['generated_seconds']:.0f} s, checkpoint "
        f"{manifest['checkpoint_bytes'] / 2**20:.0f} MiB ({manifest['codec']}), "
        f"live {manifest['live'][str(manifest['latest_version'])]} at the latest version",
        flush=True,
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--verify", str(where / "table")], check=True)
    print(f"  delta-rs and rlcd agree on the live files ({time.perf_counter() - t0:.0f} s)")
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return where / "table", manifest


def verify(path: str) -> None:
    """delta-rs and rlcd load the same live paths at the latest version (the
    generator's counts are checked by every run; delta-rs' add actions do not show DVs)."""
    import anyio
    import pyarrow as pa
    from deltalake import DeltaTable

    from rlcd.delta.load import load_snapshot
    from rlcd.storage import open_store

    async def rlcd_files() -> dict[str, str | None]:
        async with open_store(path) as store:
            adds = (await load_snapshot(store)).adds
        return dict(zip(adds["path"].to_pylist(), adds["dv_unique_id"].to_pylist(), strict=True))

    mine = anyio.run(rlcd_files)
    table = DeltaTable(path)
    theirs = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    if set(mine) != set(theirs) or len(theirs) != len(mine):
        raise SystemExit(f"live paths differ: rlcd {len(mine)}, delta-rs {len(theirs)}")
    with_dv = sum(1 for dv in mine.values() if dv is not None)
    print(f"  {len(mine)} live files, {with_dv} with a DV (rlcd)")


# --- the contenders, each in a child process --------------------------------------------------


def _rlcd_imports() -> None:
    from rlcd.cli.process import configure_process

    configure_process()  # the settings the rlcd command makes, before pyarrow loads
    import rlcd.delta.load
    import rlcd.storage  # noqa: F401


def load(name: str, path: str, expected: int) -> dict[str, float]:
    """A full load of the latest version (and for ``rlcd-plan`` its planning); its time after
    the imports."""
    figures: dict[str, float] = {}
    if name == "deltalake":
        from deltalake import DeltaTable

        start = time.perf_counter()
        count = DeltaTable(path).get_add_actions(flatten=True).num_rows
    else:
        _rlcd_imports()
        import anyio

        from rlcd.delta.load import load_snapshot
        from rlcd.delta.replay import Snapshot
        from rlcd.storage import open_store

        async def go() -> Snapshot:
            async with open_store(path) as store:
                return await load_snapshot(store)

        start = time.perf_counter()
        snapshot = anyio.run(go)
        count = snapshot.num_files
        figures["load_seconds"] = time.perf_counter() - start
        if name == "rlcd-plan":
            from rlcd.compaction.compact import plan_table
            from rlcd.compaction.policy import CompactionPolicy

            planned = time.perf_counter()
            _, bins = plan_table(snapshot, CompactionPolicy())
            figures["plan_seconds"] = time.perf_counter() - planned
            figures["bins"] = len(bins)
    seconds = figures.pop("load_seconds", time.perf_counter() - start)
    if count != expected:
        raise SystemExit(f"{name} loaded {count} live files, expected {expected}")
    return {"work_seconds": seconds} | figures


def incremental(name: str, path: str, expected: int) -> dict[str, float]:
    """A full load at the checkpoint's version + ``INCREMENT``, then a load at the checkpoint's
    version and its update by ``INCREMENT`` commits, each timed."""
    target = CHECKPOINT_VERSION + INCREMENT
    clock = time.perf_counter
    if name == "deltalake":
        from deltalake import DeltaTable

        t0 = clock()
        full = DeltaTable(path, version=target)
        t1 = clock()
        table = DeltaTable(path, version=CHECKPOINT_VERSION)
        t2 = clock()
        table.load_as_version(target)
        t3 = clock()
        counts = {
            full.get_add_actions(flatten=True).num_rows,
            table.get_add_actions(flatten=True).num_rows,
        }
    else:
        _rlcd_imports()
        import anyio

        from rlcd.delta.load import advance_snapshot, list_log, load_snapshot
        from rlcd.storage import open_store

        async def go() -> tuple[float, float, float, float, set[int]]:
            async with open_store(path) as store:
                t0 = clock()
                full = await load_snapshot(store, version=target)
                t1 = clock()
                held = await load_snapshot(store, version=CHECKPOINT_VERSION)
                t2 = clock()
                paths = await list_log(store, after_version=CHECKPOINT_VERSION + 1)
                paths = [p for p in paths if p.version <= target]
                updated = await advance_snapshot(store, held, paths)
                t3 = clock()
            assert updated.version == full.version == target
            return t0, t1, t2, t3, {full.num_files, updated.num_files}

        t0, t1, t2, t3, counts = anyio.run(go)
    if counts != {expected}:
        raise SystemExit(f"{name} loaded {counts} live files at {target}, expected {expected}")
    return {"full_seconds": t1 - t0, "checkpoint_seconds": t2 - t1, "update_seconds": t3 - t2}


def child(mode: str, name: str, path: str, expected: int, result: Path) -> None:
    run = (incremental if mode == "--incremental" else load)(name, path, expected)
    result.write_text(json.dumps(run | {"max_rss_kib": _peak_rss_kib()}))
    sys.stdout.flush()
    os._exit(0)  # as the rlcd command ends: nobody waits for the snapshot to be freed


# --- the parent: runs and figures -------------------------------------------------------------


def _spawn(argv: list[str], result: Path) -> dict[str, Any]:
    """One run in a fresh process; its whole-process figures from ``wait4``, its own from
    ``result``."""
    start, stolen = time.perf_counter(), _stolen_seconds()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    stolen = _stolen_seconds() - stolen
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise SystemExit(f"{argv[3:]} failed with exit code {code}:\n{output}")
    run = json.loads(result.read_text())
    result.unlink()
    return run | {
        "seconds": seconds,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "steal_share": stolen / (seconds * (os.cpu_count() or 1)),
        "output": output,
    }


def measure(mode: str, name: str, table: Path, expected: int) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        result = Path(out.name)
    if name.startswith("rlcd-dry-run"):
        argv = [sys.executable, "-c", _COMMAND, str(result), "compact", "--dry-run", str(table)]
        argv += ["--rewrite", "reencode"] if name == "rlcd-dry-run-reencode" else []
        run = _spawn(argv, result)
        if not run["output"].startswith("plan for "):
            raise SystemExit(f"{name} printed no plan:\n{run['output']}")
        run["plan"] = run["output"].split("\n", 1)[0]
        return run
    argv = [sys.executable, __file__, mode, name, str(table), str(expected), str(result)]
    return _spawn(argv, result)


def _alternating(names: list[str], repeat: int) -> Iterator[tuple[int, str]]:
    """Each repetition starts with the next contender: none always runs first."""
    for r in range(repeat):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            yield r, name


def _ratio(runs: dict[str, list[dict[str, Any]]], mine: str, key: str) -> float:
    """Median over repetitions of ``mine``'s ``key`` over delta-rs' in the same one."""
    pairs = zip(runs[mine], runs["deltalake"], strict=True)
    return statistics.median(a[key] / b[key] for a, b in pairs)


def compare(table: Path, manifest: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    n = manifest["files"]
    expected = manifest["live"][str(manifest["latest_version"])]
    names = args.contenders.split(",")
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in names}
    for r, name in _alternating(names, args.repeat):
        run = measure("--load", name, table, expected)
        runs[name].append(run)
        work = f" ({run['work_seconds']:.2f} s loading)" if "work_seconds" in run else ""
        if "plan_seconds" in run:
            work += f" (+{run['plan_seconds']:.3f} s planning {run['bins']} bins)"
        print(
            f"  rep {r + 1} {name:12s} {run['seconds']:6.2f} s{work}, "
            f"CPU {run['cpu_seconds']:.2f} s, peak RSS "
            f"{run['max_rss_kib'] / 1024:.0f} MiB, host stole {run['steal_share']:.0%}",
            flush=True,
        )
    summary: dict[str, Any] = {}
    print(f"\n{n} files, medians:")
    print(f"{'contender':12s} {'wall s':>7s} {'load s':>7s} {'CPU s':>6s} {'RSS MiB':>8s}")
    for name in names:
        results = runs[name]
        summary[name] = {
            key: statistics.median(x[key] for x in results)
            for key in (
                "seconds",
                "work_seconds",
                "plan_seconds",
                "cpu_seconds",
                "steal_share",
                "max_rss_kib",
            )
            if key in results[0]
        }
        s = summary[name]
        work = f"{s['work_seconds']:7.2f}" if "work_seconds" in s else f"{'-':>7s}"
        print(
            f"{name:12s} {s['seconds']:7.2f} {work} {s['cpu_seconds']:6.2f} "
            f"{s['max_rss_kib'] / 1024:8.0f}"
        )
    ratios = {}
    if "deltalake" in runs:
        print("vs deltalake (medians of paired ratios; > 1: rlcd slower / bigger):")
        for name in (c for c in names if c != "deltalake"):
            keys = ("seconds", "work_seconds", "cpu_seconds", "max_rss_kib")
            q = {k: _ratio(runs, name, k) for k in keys if k in runs[name][0]}
            ratios[name] = q
            work = f" (load alone {q['work_seconds']:.2f}x)" if "work_seconds" in q else ""
            print(
                f"  {name:12s} wall {q['seconds']:.2f}x{work}, CPU {q['cpu_seconds']:.2f}x, "
                f"peak RSS {q['max_rss_kib']:.2f}x"
            )
    if "rlcd-plan" in summary:
        print(f"  rlcd-plan: planning alone {summary['rlcd-plan']['plan_seconds']:.3f} s")
    if "rlcd-dry-run" in runs:
        print(f"  rlcd-dry-run: {runs['rlcd-dry-run'][0]['plan']}")
    for results in runs.values():
        for run in results:
            run.pop("output")
    report: dict[str, Any] = {"runs": runs, "summary": summary, "ratios": ratios}
    if args.incremental:
        report["incremental"] = compare_incremental(table, manifest, args.repeat)
    return report


def log_view(table: Path, version: int) -> Path:
    """A table beside ``table`` whose log holds hard links to ``table``'s log files up to
    ``version`` (and its ``_last_checkpoint``): the log as it stood then (the generated tables
    have no data files)."""
    view = table.parent / f"at-{version}"
    shutil.rmtree(view, ignore_errors=True)
    (view / "_delta_log").mkdir(parents=True)
    for path in (table / "_delta_log").iterdir():
        head = path.name.split(".", 1)[0]
        if path.is_file() and (not head.isdigit() or int(head) <= version):
            os.link(path, view / "_delta_log" / path.name)
    return view


def compare_incremental(table: Path, manifest: dict[str, Any], repeat: int) -> dict[str, Any]:
    expected = manifest["live"][str(CHECKPOINT_VERSION + INCREMENT)]
    view = log_view(table, CHECKPOINT_VERSION + INCREMENT)
    names = list(INCREMENTAL)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in names}
    for _, name in _alternating(names, repeat):
        run = measure("--incremental", name, view, expected)
        runs[name].append(run)
    summary = {}
    print(f"\nincremental: load at {CHECKPOINT_VERSION}, then {INCREMENT} commits")
    for name in names:
        results = runs[name]
        s = {
            key: statistics.median(x[key] for x in results)
            for key in ("full_seconds", "checkpoint_seconds", "update_seconds")
        }
        s["update_over_full"] = statistics.median(
            x["update_seconds"] / x["full_seconds"] for x in results
        )
        summary[name] = s
        print(
            f"  {name:12s} full load {s['full_seconds']:.3f} s, load at the checkpoint "
            f"{s['checkpoint_seconds']:.3f} s, update {s['update_seconds'] * 1000:.1f} ms "
            f"({s['update_over_full']:.1%} of a full load)"
        )
    for results in runs.values():
        for run in results:
            run.pop("output")
    return {"runs": runs, "summary": summary}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("--load", "--incremental"):
        mode, name, path, expected, result = sys.argv[1:6]
        child(mode, name, path, int(expected), Path(result))
    if len(sys.argv) > 1 and sys.argv[1] == "--verify":
        verify(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", default="100000,1000000", help="comma-separated live files")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--no-incremental", dest="incremental", action="store_false")
    parser.add_argument("--out", type=Path, default=OUT / "snapshot.json")
    args = parser.parse_args()
    unknown = set(args.contenders.split(",")) - set(CONTENDERS)
    if unknown:
        raise SystemExit(f"unknown contenders {sorted(unknown)}")
    # rlcd's bytecode, as a pip install leaves it (see bench/compact.py)
    compileall.compile_dir(Path(__file__).resolve().parents[1] / "rlcd", quiet=1)
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.1f} {load_start[1]:.1f} {load_start[2]:.1f}")
    reports = {}
    for n in (int(f) for f in args.files.split(",")):
        table, manifest = cached_table(n)
        reports[str(n)] = {"manifest": manifest} | compare(table, manifest, args)
    load_end = os.getloadavg()
    print(f"load average at end: {load_end[0]:.1f} {load_end[1]:.1f} {load_end[2]:.1f}")
    report = vars(args) | {"tables": reports, "load_start": load_start, "load_end": load_end}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
