"""Forward remap throughput: a winner's DV of 1M new positions onto a 10M-row output.

    .venv/bin/python bench/remap.py [--positions 1000000] [--output-rows 10000000] [--repeat 5]

The source has ``output-rows + positions`` physical rows, ``positions`` of them deleted when
the compaction read it (``Dr``, spread at random), so its run is the whole ``output-rows``
output; the winner deletes ``positions`` more of its live rows (``Dw - Dr``). Each repeat
times :func:`rlcd.reconcile.remap.forward_remap` (superset check, ranks, the result bitmap)
and the best is reported as positions per second (the bar: 10M/s), by the CPU time the
process spent (``time.process_time``: on a shared machine the wall clock mostly measures the
other processes) and by the wall clock. Deterministic data (seed 0); the result also goes to
``bench/out/remap.json``.
"""

from __future__ import annotations

import argparse
import array
import json
import time
from pathlib import Path

import numpy as np
from pyroaring import AbstractBitMap64, BitMap64

from rlcd.reconcile.remap import forward_remap


def _bitmap(values: np.ndarray) -> BitMap64:
    return BitMap64(array.array("Q", np.sort(values).astype(np.uint64).tobytes()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=1_000_000)
    parser.add_argument("--output-rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "remap.json")
    args = parser.parse_args()
    n, live = args.positions, args.output_rows
    rng = np.random.default_rng(0)
    physical = live + n
    shuffled = rng.permutation(physical)
    read_dv = _bitmap(shuffled[:n])
    winner_dv = read_dv | _bitmap(shuffled[n : 2 * n])
    cpu = wall = float("inf")
    result = None
    for _ in range(args.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        result = forward_remap(read_dv, 0, live, winner_dv)
        cpu = min(cpu, time.process_time() - start_cpu)
        wall = min(wall, time.perf_counter() - start)
    assert isinstance(result, AbstractBitMap64) and len(result) == n, result
    print(
        f"forward remap of {n:,} positions onto a {live:,}-row output: "
        f"{n / cpu / 1e6:.1f}M positions/s of CPU ({cpu * 1000:.1f} ms), "
        f"{n / wall / 1e6:.1f}M/s of wall clock ({wall * 1000:.1f} ms); bar: 10M/s"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figures = {"positions": n, "output_rows": live, "cpu_s": cpu, "wall_s": wall}
    args.out.write_text(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
