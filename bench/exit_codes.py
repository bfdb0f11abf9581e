"""Exit codes of many short ``rlcd compact`` runs: a process that finished its work must exit
with the code it returned, never die at interpreter exit.

    .venv/bin/python bench/exit_codes.py [--runs 600] [--parallel 4] [--tables a,b,...]

Runs ``rlcd compact --dry-run`` (and ``rlcd verify --files-only``) on copies of fixture tables
with checkpoints (classic, multi-part, V2 with sidecars, with DVs), each run a fresh
subprocess, ``--parallel`` at a time, and counts the exit codes. Any run that does not exit 0
is printed with the end of its stderr (pyarrow's abort at exit shows as exit -6 or 134 and
``terminate called without an active exception``). Exits 1 when any run did.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("RLCD_FIXTURES", ROOT.parent / "shared" / "fixtures" / "delta"))
TABLES = (
    "basic-dv-with-checkpoint",
    "multi-part-checkpoint",
    "v2-checkpoint-parquet",
    "v2-checkpoint-json",
)
COMMANDS = (("compact", "--dry-run"), ("verify", "--files-only"))


def run_once(table: Path, command: tuple[str, ...]) -> tuple[int, str]:
    """One CLI run: its exit code and the end of its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "rlcd", command[0], str(table), *command[1:]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stderr[-400:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--tables", default=",".join(TABLES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlcd-exit-codes-") as tmp:
        tables = []
        for name in args.tables.split(","):
            tables.append(Path(tmp) / name)
            shutil.copytree(FIXTURES / name, tables[-1])
        jobs = [
            (tables[i % len(tables)], COMMANDS[(i // len(tables)) % len(COMMANDS)])
            for i in range(args.runs)
        ]
        with ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(lambda job: run_once(*job), jobs))
    codes = collections.Counter(code for code, _ in results)
    for (table, command), (code, err) in zip(jobs, results, strict=True):
        if code != 0:
            print(f"{' '.join(command)} {table.name}: exit {code}\n{err}", file=sys.stderr)
    print(f"{args.runs} runs: " + ", ".join(f"exit {c}: {n}" for c, n in sorted(codes.items())))
    return 0 if set(codes) == {0} else 1


if __name__ == "__main__":
    raise SystemExit(main())
