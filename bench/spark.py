"""rlcd against Spark's own OPTIMIZE on the same table: throughput and peak memory.

    .venv/bin/python bench/spark.py [--files 100] [--rows 20000] [--repeat 2]

Not run in CI. Generates the table of ``bench/compact.py`` (``--files`` delta-rs appends of
``--rows`` mixed-type rows), then compacts fresh copies of it with:

- ``rlcd``: ``compact_table`` in a fresh subprocess, as ``bench/compact.py`` measures it;
- ``spark``: ``OPTIMIZE`` in a fresh local Spark session (the Spark tier's settings:
  ``local[2]``, driver memory 2g, same 128 MiB target). Its time is the ``OPTIMIZE`` statement
  alone (session start-up, printed apart, is not counted); its peak memory is the JVM's
  high-water RSS (``VmHWM``) plus the Python driver's.

Prints each contender's median time, throughput over the input bytes and highest peak RSS.
Absolute numbers on a shared machine are noise; compare within one run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from compact import TARGET, _input_bytes, generate, measure  # bench/compact.py

ROOT = Path(__file__).resolve().parent.parent


def _vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for process {pid}")


def spark_child(path: str, queue: mp.Queue) -> None:
    sys.path.insert(0, str(ROOT))
    from pyspark.sql import SparkSession

    from tests.spark.conftest import SETTINGS

    started = time.perf_counter()
    builder = SparkSession.builder.master("local[2]").appName("rlcd-bench")
    settings = {**SETTINGS, "spark.databricks.delta.optimize.maxFileSize": str(TARGET)}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - started
    start = time.perf_counter()
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()
    seconds = time.perf_counter() - start
    jvm = _vm_hwm_kib(spark.sparkContext._gateway.proc.pid)
    spark.stop()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    queue.put({"seconds": seconds, "startup_seconds": startup, "max_rss_kib": jvm + own})


def measure_spark(table: Path, scratch: Path) -> dict[str, float]:
    copy = scratch / "spark"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(table, copy)
    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=spark_child, args=(str(copy), queue))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"spark failed with exit code {proc.exitcode}")
    result = queue.get(timeout=10)
    shutil.rmtree(copy)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlcd-bench-spark-") as tmp:
        scratch = Path(tmp)
        table = scratch / "table"
        generate(table, args.files, args.rows)
        size = _input_bytes(table)
        print(f"table: {args.files} files x {args.rows} rows, {size / 2**20:.1f} MiB", flush=True)
        runs: dict[str, list[dict[str, float]]] = {"rlcd": [], "spark": []}
        for r in range(args.repeat):
            order = ("rlcd", "spark") if r % 2 == 0 else ("spark", "rlcd")
            for name in order:
                run = (
                    measure("rlcd", table, scratch)
                    if name == "rlcd"
                    else measure_spark(table, scratch)
                )
                runs[name].append(run)
                extra = (
                    f", start-up {run['startup_seconds']:.1f} s" if "startup_seconds" in run else ""
                )
                print(
                    f"  rep {r + 1} {name:5s} {run['seconds']:.2f} s, "
                    f"peak RSS {run['max_rss_kib'] / 1024:.0f} MiB{extra}",
                    flush=True,
                )
    print(f"\n{'contender':9s} {'MiB/s':>8s} {'median s':>9s} {'peak RSS MiB':>13s}")
    for name, results in runs.items():
        seconds = statistics.median(x["seconds"] for x in results)
        peak = max(x["max_rss_kib"] for x in results) / 1024
        print(f"{name:9s} {size / 2**20 / seconds:8.1f} {seconds:9.2f} {peak:13.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
