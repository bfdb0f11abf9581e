"""Writing the checkpoint of a big table, ``rlcd checkpoint`` against delta-rs (issue 41).

    .venv/bin/python bench/checkpoint.py [--files 100000,1000000] [--repeat 2]
        [--contenders rlcd,deltalake,rlcd-v2]

On the logs ``bench/snapshot.py`` generates (and caches), whose latest version has no checkpoint
(a checkpoint of N files, then 100 commits): each run copies the log into a fresh folder (new
modification times, so the expired log cleanup finds nothing to delete) and writes the latest
version's checkpoint in a fresh process, alternating:

- ``rlcd``: ``rlcd checkpoint PATH``, the command as a user runs it (its report must name the
  live count the generator expects);
- ``deltalake``: ``DeltaTable(path).create_checkpoint()``;
- ``rlcd-v2``: ``rlcd checkpoint PATH`` after a commit that adds the ``v2Checkpoint`` feature to
  the protocol (the same live files, one version later): a V2 checkpoint, in sidecars past
  100,000 file actions.

Per run: the whole process's wall time, CPU and peak RSS (``VmHWM``), and the checkpoint's
size (its sidecars', counted in, apart too). Writes JSON to ``bench/out/checkpoint.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compact import _COMMAND, _peak_rss_kib
from snapshot import OUT, _alternating, _spawn, cached_table

CONTENDERS = ("rlcd", "deltalake", "rlcd-v2")


def _delta_rs(path: str, result: str) -> None:
    """delta-rs' checkpoint of the latest version, in this (child) process."""
    from deltalake import DeltaTable

    DeltaTable(path).create_checkpoint()
    Path(result).write_text(json.dumps({"max_rss_kib": _peak_rss_kib()}))
    os._exit(0)


def _enable_v2(log: Path, version: int) -> int:
    """Commit the table's protocol (from its newest checkpoint) with ``v2Checkpoint`` added, as
    ``version + 1``; that version."""
    import pyarrow.parquet as pq

    newest = max(log.glob("*.checkpoint.parquet"))
    protocol = next(p for p in pq.read_table(newest, columns=["protocol"])[0].to_pylist() if p)
    protocol = {k: v for k, v in protocol.items() if v is not None}
    for kind in ("readerFeatures", "writerFeatures"):
        protocol[kind] = [*protocol.get(kind, ()), "v2Checkpoint"]
    protocol |= {"minReaderVersion": 3, "minWriterVersion": 7}
    info = {"timestamp": int(time.time() * 1000), "operation": "SET TBLPROPERTIES"}
    lines = [{"commitInfo": info}, {"protocol": protocol}]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (log / f"{version + 1:020d}.json").write_text(text)
    return version + 1


def _run(name: str, log: Path, version: int, expected: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rlcd-bench-checkpoint-", dir=OUT) as tmp:
        table = Path(tmp)
        shutil.copytree(log, table / "_delta_log", copy_function=shutil.copyfile)
        result = table / "result.json"
        if name == "rlcd-v2":
            version = _enable_v2(table / "_delta_log", version)
        if name.startswith("rlcd"):
            argv = [sys.executable, "-c", _COMMAND, str(result), "checkpoint", str(table)]
        else:
            argv = [sys.executable, __file__, "--delta-rs", str(table), str(result)]
        run = _spawn(argv, result)
        if name.startswith("rlcd") and f"{expected} live files" not in run["output"]:
            raise SystemExit(f"rlcd checkpoint did not write {expected} files:\n{run['output']}")
        written = list((table / "_delta_log").glob(f"{version:020d}.checkpoint*.parquet"))
        if len(written) != 1:
            raise SystemExit(f"{name} wrote {[p.name for p in written]}")
        sidecars = list((table / "_delta_log" / "_sidecars").glob("*.parquet"))
        run["sidecars"] = len(sidecars)
        run["sidecar_bytes"] = sum(p.stat().st_size for p in sidecars)
        run["checkpoint_bytes"] = written[0].stat().st_size + run["sidecar_bytes"]
        run.pop("output")
        return run


def compare(n: int, repeat: int, contenders: list[str]) -> dict[str, Any]:
    table, manifest = cached_table(n)
    version = manifest["latest_version"]
    expected = manifest["live"][str(version)]
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
    for r, name in _alternating(contenders, repeat):
        run = _run(name, table / "_delta_log", version, expected)
        runs[name].append(run)
        print(
            f"  rep {r + 1} {name:9s} {run['seconds']:6.2f} s, CPU {run['cpu_seconds']:.2f} s, "
            f"peak RSS {run['max_rss_kib'] / 1024:.0f} MiB, checkpoint "
            f"{run['checkpoint_bytes'] / 2**20:.1f} MiB"
            + (f" ({run['sidecars']} sidecars)" if run["sidecars"] else ""),
            flush=True,
        )
    summary = {
        name: {
            key: statistics.median(x[key] for x in results)
            for key in ("seconds", "cpu_seconds", "max_rss_kib", "checkpoint_bytes")
        }
        for name, results in runs.items()
    }
    print(f"{n} files ({expected} live at version {version}), medians:")
    for name, s in summary.items():
        print(
            f"  {name:9s} {s['seconds']:6.2f} s, CPU {s['cpu_seconds']:.2f} s, "
            f"peak RSS {s['max_rss_kib'] / 1024:.0f} MiB"
        )
    return {"live": expected, "version": version, "runs": runs, "summary": summary}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--delta-rs":
        _delta_rs(sys.argv[2], sys.argv[3])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", default="100000,1000000", help="comma-separated live files")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--contenders", default="rlcd,deltalake", help=",".join(CONTENDERS))
    parser.add_argument("--out", type=Path, default=OUT / "checkpoint.json")
    args = parser.parse_args()
    contenders = args.contenders.split(",")
    if not set(contenders) <= set(CONTENDERS):
        parser.error(f"--contenders: choose among {', '.join(CONTENDERS)}")
    report = {n: compare(int(n), args.repeat, contenders) for n in args.files.split(",")}
    args.out.write_text(json.dumps(vars(args) | {"tables": report}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
