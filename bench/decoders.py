"""Parquet decoders side by side: what rlcd's decode costs, and what a faster one would risk.

    .venv/bin/python bench/decoders.py [--files 200] [--rows 50000] [--repeat 5] [--mutations 100]

Two measurements on the table ``bench/compact.py`` generates:

- speed: the CPU seconds each decoder spends reading every data file of the table, each run in a
  fresh subprocess: ``pyarrow`` as rlcd reads a source (``ParquetFile.iter_batches``, one
  thread), ``deltalake`` (delta-rs' own reader: a ``QueryBuilder`` scan of the table, all
  columns) and, when installed, ``arro3`` (arrow-rs' reader through ``arro3-io``, not an rlcd
  dependency: ``pip install arro3-io`` to include it);
- damaged input: each Python-callable decoder reads ``--mutations`` copies of a small Parquet
  file (uncompressed, then snappy) per kind of damage, each in a subprocess: a few bytes
  overwritten at random, or an erased stretch (16 to 256 bytes of 0xFF, what erased flash
  reads as); the footer is kept intact, so that the data pages are what is damaged. A decoder
  either reads something, raises a Python exception, or kills the process. rlcd needs the
  second or first, never the third.

Both go into ``bench/out/decoders.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from compact import generate

_SPEED = r"""
import glob, resource, sys
name, table = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(table + "/*.parquet"))
import pyarrow as pa, pyarrow.parquet as pq
if name == "deltalake":
    from deltalake import DeltaTable, QueryBuilder
elif name == "arro3":
    import arro3.io
before = resource.getrusage(resource.RUSAGE_SELF)
rows = 0
if name == "pyarrow":
    for f in files:
        reader = pq.ParquetFile(pa.OSFile(f))
        for batch in reader.iter_batches(batch_size=65_536, use_threads=False):
            rows += batch.num_rows
elif name == "deltalake":
    for batch in QueryBuilder().register("t", DeltaTable(table)).execute("select * from t"):
        rows += batch.num_rows
else:
    for f in files:
        for batch in pa.RecordBatchReader.from_stream(arro3.io.read_parquet(f, batch_size=65_536)):
            rows += batch.num_rows
after = resource.getrusage(resource.RUSAGE_SELF)
print(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, rows)
"""

_CORRUPT = r"""
import sys
import pyarrow as pa, pyarrow.parquet as pq
name, path = sys.argv[1], sys.argv[2]
try:
    pq.ParquetFile(path)  # the footer is parsed first, as rlcd does
    if name == "pyarrow":
        batches = pq.ParquetFile(path).iter_batches(use_threads=False)
    else:
        import arro3.io
        batches = pa.RecordBatchReader.from_stream(arro3.io.read_parquet(path))
    for batch in batches:
        batch.validate(full=True)
    print("read")
except Exception:
    print("raised")
"""


def _installed(module: str) -> bool:
    check = f"import {module}"
    return subprocess.run([sys.executable, "-c", check], capture_output=True).returncode == 0


def speed(table: Path, decoders: list[str], repeat: int) -> dict[str, float]:
    """Median CPU seconds per decoder; the decoders alternate within each repetition."""
    runs: dict[str, list[float]] = {d: [] for d in decoders}
    for r in range(repeat):
        for name in decoders[r % len(decoders) :] + decoders[: r % len(decoders)]:
            out = subprocess.run(
                [sys.executable, "-c", _SPEED, name, str(table)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            runs[name].append(float(out[0]))
    return {name: statistics.median(v) for name, v in runs.items()}


def _sample(path: Path, compression: str) -> bytes:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    n = 20_000
    table = pa.table(
        {
            "i": rng.integers(0, 1000, n),
            "s": [f"v{x}" for x in rng.integers(0, 5000, n)],
            "d": rng.random(n),
            "l": pa.array([[1, 2, None]] * n),
            "n": [None if x % 7 == 0 else x for x in range(n)],
        }
    )
    pq.write_table(table, path, compression=compression, data_page_size=8192)
    return path.read_bytes()


def _bytes(raw: bytes, end: int, rng: random.Random) -> bytearray:
    damaged = bytearray(raw)
    for _ in range(rng.randint(1, 8)):
        damaged[rng.randrange(4, end)] = rng.randrange(256)
    return damaged


def _erased(raw: bytes, end: int, rng: random.Random) -> bytearray:
    damaged = bytearray(raw)
    n = rng.randint(16, 256)
    at = rng.randrange(4, end - n)
    damaged[at : at + n] = b"\xff" * n
    return damaged


DAMAGE = {"bytes": _bytes, "erased": _erased}


def corrupt(scratch: Path, decoders: list[str], mutations: int) -> dict[str, dict[str, int]]:
    """Per damage, codec and decoder, how the damaged files ended: read, raised, or crashed."""
    outcomes: dict[str, dict[str, int]] = {}
    for compression in ("none", "snappy"):
        raw = _sample(scratch / f"sample-{compression}.parquet", compression)
        end = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")  # where the footer starts
        for kind, damage in DAMAGE.items():
            for name in decoders:
                rng = random.Random(7)  # the same damage for every decoder
                counts = {"read": 0, "raised": 0, "crashed": 0}
                for _ in range(mutations):
                    path = scratch / "damaged.parquet"
                    path.write_bytes(damage(raw, end, rng))
                    done = subprocess.run(
                        [sys.executable, "-c", _CORRUPT, name, str(path)],
                        capture_output=True,
                        text=True,
                    )
                    counts[done.stdout.strip() if done.returncode == 0 else "crashed"] += 1
                outcomes[f"{name} {compression} {kind}"] = counts
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mutations", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "decoders.json")
    args = parser.parse_args()
    arro3 = _installed("arro3.io")
    if not arro3:
        print("arro3-io is not installed: measuring pyarrow and deltalake only")
    with tempfile.TemporaryDirectory(prefix="rlcd-bench-") as tmp:
        scratch = Path(tmp)
        table = scratch / "table"
        generate(table, args.files, args.rows)
        cpu = speed(table, ["pyarrow", "deltalake"] + ["arro3"] * arro3, args.repeat)
        print(f"\ndecode CPU s, {args.files} files x {args.rows} rows (median of {args.repeat}):")
        for name, seconds in cpu.items():
            print(f"  {name:10s} {seconds:6.2f}  ({seconds / cpu['pyarrow']:.2f}x pyarrow)")
        ends = corrupt(scratch, ["pyarrow"] + ["arro3"] * arro3, args.mutations)
        print(f"\n{args.mutations} damaged files each: read / raised / crashed the process")
        for name, counts in ends.items():
            print(f"  {name:22s} {counts['read']:5d} {counts['raised']:7d} {counts['crashed']:8d}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"decode_cpu_seconds": cpu, "damaged": ends}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
