"""Compaction throughput and memory, side by side in one run.

    .venv/bin/python bench/compact.py [--files 200] [--rows 50000] [--repeat 5]

Generates one Delta table (``--files`` appends of ``--rows`` rows of mixed types, as a streaming
writer leaves them), then compacts identical copies of it with:

- ``deltalake``: delta-rs ``optimize.compact()``, same target size and codec;
- ``floor``: pyarrow reading every file and writing them into one file per target size (the
  least work any compactor can do, with no Delta bookkeeping);
- ``rlcd``: ``compact_table`` as the CLI runs it;
- ``rlcd-nocount``: the same with the batch counter switched off.

Each run is a fresh subprocess (so peak RSS is its own), on a fresh copy of the table; the
contenders alternate within each repetition (each repetition starting with the next one).
Prints each contender's median time and highest peak RSS, and the ratios that matter: a time
ratio is the median over repetitions of the ratio within one repetition (a slow spell of the
machine hits both contenders of a pair), peak RSS compares the highest of each. Writes JSON
to ``bench/out/compact.json``. Absolute numbers on a shared machine are noise; the ratios are
measured under the same noise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TARGET = 128 * 1024 * 1024
ROW_GROUP_ROWS = 1_048_576
CONTENDERS = ("deltalake", "floor", "rlcd", "rlcd-nocount")


def generate(path: Path, files: int, rows: int) -> None:
    """Deterministic mixed-type data, one delta-rs append per file (a streaming writer's log)."""
    import deltalake
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    epoch = np.datetime64("2026-01-01T00:00:00", "us")
    for f in range(files):
        i = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        customer = pc.binary_join_element_wise(
            "customer-", pc.cast(pa.array((i * 7919) % 100_000), pa.string()), ""
        )
        table = pa.table(
            {
                "id": pa.array(i),
                "customer": customer,
                "amount": pa.array(((i * 37) % 100_000) / 100),
                "quantity": pa.array(((i * 13) % 1000).astype(np.int32)),
                "price": pc.cast(pa.array(((i * 31) % 1_000_000) / 100), pa.decimal128(12, 2)),
                "at": pa.array(epoch + i.astype("timedelta64[s]"), pa.timestamp("us", tz="UTC")),
                "flag": pa.array(i % 5 == 0),
            }
        )
        deltalake.write_deltalake(str(path), table, mode="append")


def _input_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*.parquet"))


def run_deltalake(path: Path) -> None:
    import deltalake

    props = deltalake.WriterProperties(compression="ZSTD")
    deltalake.DeltaTable(str(path)).optimize.compact(target_size=TARGET, writer_properties=props)


def run_floor(path: Path) -> None:
    """Decode every file and re-encode it with the same writer settings as rlcd (zstd, row
    groups of ``ROW_GROUP_ROWS``, small dictionaries), one output per ``TARGET`` input bytes:
    everything a compactor must do, and nothing Delta asks for on top."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlcd.compaction.rewrite import RewriteSettings

    dictionary = RewriteSettings.__dataclass_fields__["dictionary_page_limit"].default
    writer, written, out, pending = None, 0, 0, []

    def flush() -> None:
        if pending:
            table = pa.Table.from_batches(pending)
            writer.write_table(table, row_group_size=table.num_rows)
            pending.clear()

    for f in sorted(path.glob("*.parquet")):
        parquet = pq.ParquetFile(pa.BufferReader(f.read_bytes()))
        if writer is None:
            writer = pq.ParquetWriter(
                str(path / f"floor-{out}.parquet"),
                parquet.schema_arrow,
                compression="zstd",
                dictionary_pagesize_limit=dictionary,
            )
        for batch in parquet.iter_batches(batch_size=65_536, use_threads=False):
            pending.append(batch)
            if sum(b.num_rows for b in pending) >= ROW_GROUP_ROWS:
                flush()
        written += f.stat().st_size
        if written >= TARGET:
            flush()
            writer.close()
            writer, written, out = None, 0, out + 1
    if writer is not None:
        flush()
        writer.close()


def run_rlcd(path: Path, count: bool) -> None:
    import anyio

    from rlcd.compaction.compact import compact_table
    from rlcd.compaction.policy import CompactionPolicy
    from rlcd.storage import LocalStore

    async def go() -> None:
        async with LocalStore(path) as store:
            report = await compact_table(
                store, CompactionPolicy(target_file_size=TARGET), count_rows=count
            )
            assert report.committed_version is not None and not report.failed
            assert (report.untagged == 0) == count

    anyio.run(go)


def child(name: str, path: str, queue: mp.Queue) -> None:
    p = Path(path)
    if name.startswith("rlcd"):
        import rlcd.cli  # the process settings the rlcd command makes, before pyarrow loads
    # import every contender's modules before the clock starts: startup is not compaction
    import deltalake  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    import rlcd.compaction.compact
    import rlcd.storage  # noqa: F401

    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    if name == "deltalake":
        run_deltalake(p)
    elif name == "floor":
        run_floor(p)
    else:
        run_rlcd(p, count=name == "rlcd")
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    queue.put({"seconds": seconds, "cpu_seconds": cpu, "max_rss_kib": after.ru_maxrss})


def measure(name: str, table: Path, scratch: Path) -> dict[str, float]:
    copy = scratch / name
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(table, copy)
    ctx = mp.get_context("spawn")  # deltalake panics in forked processes (pitfalls)
    queue: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(name, str(copy), queue))
    proc.start()
    proc.join()  # the result is a few bytes: the child never blocks on a full queue
    if proc.exitcode != 0:
        raise SystemExit(f"{name} failed with exit code {proc.exitcode}")
    result = queue.get(timeout=10)
    shutil.rmtree(copy)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "compact.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlcd-bench-") as tmp:
        scratch = Path(tmp)
        table = scratch / "table"
        t0 = time.perf_counter()
        generate(table, args.files, args.rows)
        size = _input_bytes(table)
        print(
            f"table: {args.files} files x {args.rows} rows, {size / 2**20:.1f} MiB "
            f"(generated in {time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
        runs: dict[str, list[dict[str, float]]] = {c: [] for c in CONTENDERS}
        for r in range(args.repeat):
            # each repetition starts with another contender: none always runs first
            for name in CONTENDERS[r % len(CONTENDERS) :] + CONTENDERS[: r % len(CONTENDERS)]:
                run = measure(name, table, scratch)
                runs[name].append(run)
                print(
                    f"  rep {r + 1} {name:13s} {run['seconds']:.2f} s, "
                    f"CPU {run['cpu_seconds']:.2f} s, peak RSS {run['max_rss_kib'] / 1024:.0f} MiB",
                    flush=True,
                )
    summary = {}
    for name, results in runs.items():
        seconds = statistics.median(x["seconds"] for x in results)
        summary[name] = {
            "median_seconds": seconds,
            "median_cpu_seconds": statistics.median(x["cpu_seconds"] for x in results),
            "mib_per_s": size / 2**20 / seconds,
            "peak_rss_mib": max(x["max_rss_kib"] for x in results) / 1024,
            "runs": results,
        }
    dl, on = summary["deltalake"], summary["rlcd"]

    def paired(slow: str, fast: str) -> float:
        """Median over repetitions of ``slow``'s time over ``fast``'s in the same repetition."""
        pairs = zip(runs[slow], runs[fast], strict=True)
        return statistics.median(a["seconds"] / b["seconds"] for a, b in pairs)

    ratios = {
        "rlcd_vs_deltalake_throughput": paired("deltalake", "rlcd"),
        "rlcd_vs_floor_throughput": paired("floor", "rlcd"),
        "counter_overhead": paired("rlcd", "rlcd-nocount") - 1,
        "rlcd_vs_deltalake_peak_rss": on["peak_rss_mib"] / dl["peak_rss_mib"],
    }
    print(f"\n{'contender':13s} {'MiB/s':>8s} {'median s':>9s} {'CPU s':>6s} {'peak RSS MiB':>13s}")
    for name in CONTENDERS:
        s = summary[name]
        print(
            f"{name:13s} {s['mib_per_s']:8.1f} {s['median_seconds']:9.2f} "
            f"{s['median_cpu_seconds']:6.2f} {s['peak_rss_mib']:13.0f}"
        )
    print(
        "\nrlcd / deltalake throughput: "
        f"{ratios['rlcd_vs_deltalake_throughput']:.2f}x (bar >= 1.0)\n"
        f"rlcd / floor throughput:     {ratios['rlcd_vs_floor_throughput']:.2f}x\n"
        f"batch counter overhead:      {ratios['counter_overhead'] * 100:+.1f}% (bar <= 2%)\n"
        f"rlcd / deltalake peak RSS:   {ratios['rlcd_vs_deltalake_peak_rss']:.2f}x (bar <= 1.0)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "files": args.files,
                "rows": args.rows,
                "input_bytes": size,
                "summary": summary,
                "ratios": ratios,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
