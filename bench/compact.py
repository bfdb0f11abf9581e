"""Compaction throughput, CPU, output size and memory, side by side in one run.

    .venv/bin/python bench/compact.py [--shape bench|skewed|fixture|medium|medium-pyarrow|random]
        [--files 200] [--rows 50000] [--repeat 5] [--contenders deltalake,rlcd,rlcd-conservative]
    .venv/bin/python bench/compact.py --s3 [--latency-ms 20] ...
    .venv/bin/python bench/compact.py --bin-gib 0.5,2,4
    .venv/bin/python bench/compact.py --evict-libraries ...

Generates one Delta table of the chosen shape (``bench/shapes.py``: ``--files`` appends of
``--rows`` rows, as a streaming writer leaves them), then compacts identical copies of it with:

- ``deltalake``: delta-rs ``optimize.compact()``, same target size and codec;
- ``rlcd``: the ``rlcd compact`` command, as a user runs it (``python -m rlcd``, its defaults:
  adaptive encodings, the leftover sweep before the plan);
- ``rlcd-conservative``: the same with ``--encodings conservative``;
- ``rlcd-reencode``: the same with ``--rewrite reencode`` (no row group copied);
- ``rlcd-recompress``: the same with ``--recompress`` (row groups of another codec re-encoded);
- ``floor`` (local only): pyarrow reading every file and writing them into one file per target
  size (the least work any compactor can do, with no Delta bookkeeping);
- ``rlcd-nocount``: ``compact_table`` called in a process of its own with the batch counter
  switched off (the counter's cost, against ``rlcd-lib``, the same call with it on);
  ``rlcd-lib`` also reports the bytes its store moved (``rlcd.storage.metered``): fetched,
  uploaded, and copied by S3 itself.

Each run is a fresh process on a fresh copy of the table (``--s3``: a server-side copy on a moto
server this command starts, optionally behind a proxy adding ``--latency-ms`` to each request,
with the requests of each run counted). The contenders alternate within each repetition (each
repetition starting with the next one). Per contender: the whole process's wall time and CPU
(interpreter start and imports included: what a user waits for), the compaction's own time
(after imports; not known for the command, whose work is all of it), peak RSS, and the bytes
of the files it wrote. Time and CPU ratios are
medians over repetitions of the ratio within one repetition (a slow spell of the machine hits
both of a pair); peak RSS compares the highest of each. Absolute numbers on a shared machine
are noise; the ratios are measured under the same noise.

Each run also reports the share of the machine's CPU capacity the hypervisor stole during it
(``/proc/stat``): on a shared host a compactor gets only the cores not stolen, so where much
is stolen wall time follows CPU time, and the throughput ratio follows the CPU ratio.

``--evict-libraries`` first drops the environment's shared libraries from the page cache, so
that peak RSS counts their pages as read back from disk rather than as ``pip install`` wrote
them (see docs/performance.md).

``--bin-gib 0.5,2,4`` instead compacts, for each size, one table of that many GiB (of
``--shape``: one commit, or the medium shapes' batch writers' files) as a single bin with each
rlcd contender of ``--contenders`` (e.g. ``rlcd,rlcd-reencode``: the copy path and the
re-encode path), and reports its peak RSS per size.

rlcd's modules are byte-compiled first, as a pip install leaves them.

Writes JSON to ``bench/out/compact-SHAPE[-s3|-memory].json``.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shapes import SHAPES, generate, generate_one_commit

TARGET = 128 * 1024 * 1024
ROW_GROUP_ROWS = 1_048_576
CONTENDERS = (
    "deltalake",
    "floor",
    "rlcd",
    "rlcd-conservative",
    "rlcd-reencode",
    "rlcd-recompress",
    "rlcd-lib",
    "rlcd-nocount",
)
DEFAULT_CONTENDERS = "deltalake,rlcd,rlcd-conservative"
COMMANDS = {
    "rlcd": (),
    "rlcd-conservative": ("--encodings", "conservative"),
    "rlcd-reencode": ("--rewrite", "reencode"),
    "rlcd-recompress": ("--recompress",),
}

__all__ = ("generate",)  # bench/decoders.py builds its table with it


# --- the contenders, each in a child process ------------------------------------------------------


def _storage_options() -> dict[str, str]:
    """delta-rs' settings for the moto server the parent started (from the environment)."""
    return {
        "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
        "AWS_REGION": os.environ["AWS_REGION"],
        "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",  # one writer: no locking provider needed
    }


def run_deltalake(uri: str, target: int) -> None:
    import deltalake

    options = _storage_options() if uri.startswith("s3://") else None
    props = deltalake.WriterProperties(compression="ZSTD")
    table = deltalake.DeltaTable(uri, storage_options=options)
    table.optimize.compact(target_size=target, writer_properties=props)


def run_floor(uri: str, target: int) -> None:
    """Decode every file and re-encode it with the same writer settings as rlcd (zstd, row
    groups of ``ROW_GROUP_ROWS``, small dictionaries), one output per ``target`` input bytes:
    everything a compactor must do, and nothing Delta asks for on top."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlcd.compaction.rewrite import RewriteSettings

    path = Path(uri)
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
        if written >= target:
            flush()
            writer.close()
            writer, written, out = None, 0, out + 1
    if writer is not None:
        flush()
        writer.close()


def run_rlcd(uri: str, target: int, *, count: bool) -> dict[str, int]:
    """Compact through a metered store; the bytes it moved, by operation (``get``: fetched,
    ``upload``: sent, ``copy``: copied by the store itself)."""
    import anyio

    from rlcd.compaction.compact import compact_table
    from rlcd.compaction.policy import CompactionPolicy
    from rlcd.daemon.logging import configure_logging
    from rlcd.storage import S3Config, open_store
    from rlcd.storage.metered import MeteredStore

    configure_logging(level="warning")  # as the command does
    s3 = None
    if uri.startswith("s3://"):
        s3 = S3Config(endpoint_url=os.environ["AWS_ENDPOINT_URL"], addressing_style="path")
    policy = CompactionPolicy(target_file_size=target)

    async def go() -> dict[str, int]:
        async with open_store(uri, s3=s3) as store:
            metered = MeteredStore(store)
            report = await compact_table(metered, policy, count_rows=count)
            assert report.committed_version is not None and not report.failed
            assert (report.untagged == 0) == count
            return dict(metered.bytes)

    return anyio.run(go)


def import_contender(name: str, s3: bool) -> None:
    """What the contender's process loads before it works (the S3 backend only for S3)."""
    if name.startswith("rlcd"):
        from rlcd.cli.process import configure_process

        configure_process()  # the settings the rlcd command makes, before pyarrow loads
        import rlcd.compaction.compact
        import rlcd.storage

        if s3:
            import rlcd.storage.s3
        if name in COMMANDS:  # the command also sets up its logging
            import rlcd.cli.main
            import rlcd.daemon.logging  # noqa: F401
    elif name == "deltalake":
        import deltalake  # noqa: F401
    else:
        import pyarrow.parquet  # noqa: F401


def child(name: str, uri: str, target: int, result: Path) -> None:
    """One contender's run; its own timings (after its imports) go to ``result``."""
    import_contender(name, uri.startswith("s3://"))
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    moved: dict[str, int] = {}
    if name == "deltalake":
        run_deltalake(uri, target)
    elif name == "floor":
        run_floor(uri, target)
    else:
        moved = run_rlcd(uri, target, count=name != "rlcd-nocount")
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    peak = _peak_rss_kib()
    run = {"work_seconds": seconds, "work_cpu_seconds": cpu, "max_rss_kib": peak}
    result.write_text(json.dumps(run | ({"storage_bytes": moved} if moved else {})))


def imports_only(name: str, s3: bool, result: Path) -> None:
    """The contender's imports and nothing else: the peak RSS its libraries alone take."""
    import_contender(name, s3)
    result.write_text(json.dumps({"max_rss_kib": _peak_rss_kib()}))


def _peak_rss_kib() -> int:
    """This process's own peak RSS (``VmHWM``). Not ``ru_maxrss``: Linux carries a process's
    peak across ``exec``, so a child would report at least its parent's RSS at fork."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# --- the parent: tables, runs, figures ------------------------------------------------------------


def _parquet_sizes(path: Path) -> dict[str, int]:
    return {
        p.relative_to(path).as_posix(): p.stat().st_size
        for p in path.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }


_COMMAND = """
import json, os, runpy, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
out, sys.argv, exit_now = sys.argv[1], ["rlcd", *sys.argv[2:]], os._exit
def record_then_exit(code):
    open(out, "w").write(json.dumps({"max_rss_kib": peak()}))
    exit_now(code)
os._exit = record_then_exit
runpy.run_module("rlcd", run_name="__main__", alter_sys=True)
"""
"""The command as ``python -m rlcd`` runs it, its peak RSS written as it exits (the command
ends with ``os._exit``; ``-c``: nothing of this script is imported into it)."""


def _command(name: str, uri: str, target: int, result: Path) -> list[str]:
    args = ["compact", uri, "--target-size", str(target), "--codec", "zstd", *COMMANDS[name]]
    if uri.startswith("s3://"):
        args += ["--addressing-style", "path"]  # the endpoint: AWS_ENDPOINT_URL, as for delta-rs
    return [sys.executable, "-c", _COMMAND, str(result), *args]


def _stolen_seconds() -> float:
    """CPU time the hypervisor gave other guests while this one's vCPUs had work (all vCPUs;
    the ``steal`` column of ``/proc/stat``; 0 where there is none)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return 0.0
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def _spawn(name: str, uri: str, target: int, env: dict[str, str]) -> dict[str, float]:
    """Run one contender in a fresh process; its whole-process figures from ``wait4``."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        result = Path(out.name)
    if name in COMMANDS:
        argv = _command(name, uri, target, result)
    else:
        argv = [sys.executable, __file__, "--child", name, uri, str(target), str(result)]
    start, stolen = time.perf_counter(), _stolen_seconds()
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    stolen = _stolen_seconds() - stolen
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed with exit code {proc.returncode}")
    run = json.loads(result.read_text())
    result.unlink()
    run.update(
        seconds=seconds,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        steal_share=stolen / (seconds * (os.cpu_count() or 1)),
    )
    # the command's work is the whole process
    run.setdefault("work_seconds", seconds)
    run.setdefault("work_cpu_seconds", run["cpu_seconds"])
    return run


class Local:
    """Runs on fresh local copies of the table."""

    def __init__(self, table: Path, scratch: Path) -> None:
        self.table, self.scratch = table, scratch
        self.before = _parquet_sizes(table)

    def measure(self, name: str, target: int) -> dict[str, float]:
        copy = self.scratch / name
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(self.table, copy)
        run = _spawn(name, str(copy), target, {})
        written = {k: v for k, v in _parquet_sizes(copy).items() if k not in self.before}
        run["output_bytes"] = sum(written.values())
        shutil.rmtree(copy)
        return run


class Remote:
    """Runs on fresh server-side copies of the table on the moto server."""

    def __init__(self, s3: Any, table: Path) -> None:
        self.s3 = s3
        s3.upload(table, "golden")
        self.before = set(s3.keys("golden"))
        self.runs = 0

    def measure(self, name: str, target: int) -> dict[str, float]:
        self.runs += 1
        prefix = f"run-{self.runs}-{name}"
        self.s3.copy("golden", prefix)
        self.s3.counter.take()
        self.s3.take_bytes()
        run = _spawn(name, self.s3.uri(prefix), target, self.s3.environment())
        requests = self.s3.counter.take()
        wire = self.s3.take_bytes()
        if wire is not None:
            run["wire_bytes"] = wire
        written = {
            k: v
            for k, v in self.s3.keys(prefix).items()
            if k not in self.before and k.endswith(".parquet")
        }
        run["output_bytes"] = sum(written.values())
        run["requests"] = sum(requests.values())
        run["requests_by_method"] = requests
        self.s3.delete(prefix)
        return run


def _line(name: str, run: dict[str, Any]) -> str:
    text = (
        f"{name:17s} {run['seconds']:6.2f} s ({run['work_seconds']:.2f} s compacting), "
        f"CPU {run['cpu_seconds']:.2f} s, peak RSS {run['max_rss_kib'] / 1024:.0f} MiB, "
        f"wrote {run['output_bytes'] / 2**20:.2f} MiB, host stole {run['steal_share']:.0%}"
    )
    if "requests" in run:
        text += f", {run['requests']} requests {run['requests_by_method']}"
    if "wire_bytes" in run:  # --count-bytes: what the proxy carried each way, in MiB
        wire = {way: round(n / 2**20, 1) for way, n in sorted(run["wire_bytes"].items())}
        text += f", wire MiB {wire}"
    if "storage_bytes" in run:  # rlcd-lib: what its metered store moved, in MiB
        moved = {op: round(n / 2**20, 1) for op, n in sorted(run["storage_bytes"].items()) if n}
        text += f", storage MiB {moved}"
    return text


def _import_rss_mib(name: str, s3: bool) -> float:
    """Peak RSS of a process that only imports what ``name`` imports (median of 3)."""
    peaks = []
    for _ in range(3):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
            result = Path(out.name)
        where = "s3" if s3 else "local"
        argv = [sys.executable, __file__, "--imports-only", name, where, str(result)]
        subprocess.run(argv, check=True)
        peaks.append(json.loads(result.read_text())["max_rss_kib"] / 1024)
        result.unlink()
    return statistics.median(peaks)


def evict_libraries() -> tuple[int, int]:
    """Drop the shared libraries of this interpreter's environment from the page cache (after
    writing back any dirty pages), so that every contender maps them as read back from disk,
    as after a reboot, instead of as ``pip install`` wrote them (see docs/performance.md).
    Returns the files and bytes dropped; nothing on systems without ``posix_fadvise``."""
    if not hasattr(os, "posix_fadvise"):
        return 0, 0
    files = dropped = 0
    for path in Path(sys.prefix).rglob("*.so*"):
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        files, dropped = files + 1, dropped + path.stat().st_size
    return files, dropped


def compare(args: argparse.Namespace, runner: Any, size: int) -> dict[str, Any]:
    contenders = args.contenders.split(",")
    if args.evict_libraries:
        files, dropped = evict_libraries()
        print(f"dropped {files} shared libraries ({dropped / 2**20:.0f} MiB) from the page cache")
    # the shared libraries' pages in RSS depend on how the page cache holds their files (just
    # installed or read back from disk: see docs/performance.md), so each run shows what they
    # weigh
    imports = {c: _import_rss_mib(c, args.s3) for c in contenders}
    print(
        "peak RSS of the imports alone: "
        + ", ".join(f"{c} {mib:.0f} MiB" for c, mib in imports.items()),
        flush=True,
    )
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
    for r in range(args.repeat):
        # each repetition starts with another contender: none always runs first
        for name in contenders[r % len(contenders) :] + contenders[: r % len(contenders)]:
            run = runner.measure(name, TARGET)
            runs[name].append(run)
            print(f"  rep {r + 1} {_line(name, run)}", flush=True)
    summary: dict[str, Any] = {}
    for name, results in runs.items():
        seconds = statistics.median(x["seconds"] for x in results)
        summary[name] = {
            "median_seconds": seconds,
            "median_work_seconds": statistics.median(x["work_seconds"] for x in results),
            "median_cpu_seconds": statistics.median(x["cpu_seconds"] for x in results),
            "median_work_cpu_seconds": statistics.median(x["work_cpu_seconds"] for x in results),
            "mib_per_s": size / 2**20 / seconds,
            "peak_rss_mib": max(x["max_rss_kib"] for x in results) / 1024,
            "output_mib": statistics.median(x["output_bytes"] for x in results) / 2**20,
            "median_steal_share": statistics.median(x["steal_share"] for x in results),
            "imports_rss_mib": imports[name],
            "runs": results,
        }
        if "requests" in results[0]:
            summary[name]["median_requests"] = statistics.median(x["requests"] for x in results)
        if "wire_bytes" in results[0]:  # downloaded and uploaded, as a share of the table
            moved = statistics.median(sum(x["wire_bytes"].values()) for x in results)
            summary[name]["median_wire_share"] = moved / size

    def paired(slow: str, fast: str, key: str) -> float:
        """Median over repetitions of ``slow``'s ``key`` over ``fast``'s in the same one."""
        pairs = zip(runs[slow], runs[fast], strict=True)
        return statistics.median(a[key] / b[key] for a, b in pairs)

    print(
        f"\n{'contender':17s} {'MiB/s':>7s} {'wall s':>7s} {'work s':>7s} {'CPU s':>6s} "
        f"{'RSS MiB':>8s} {'out MiB':>8s} {'stolen':>6s}"
    )
    for name in contenders:
        s = summary[name]
        print(
            f"{name:17s} {s['mib_per_s']:7.1f} {s['median_seconds']:7.2f} "
            f"{s['median_work_seconds']:7.2f} {s['median_cpu_seconds']:6.2f} "
            f"{s['peak_rss_mib']:8.0f} {s['output_mib']:8.2f} {s['median_steal_share']:6.0%}"
            + (f"  {s['median_requests']:.0f} requests" if "median_requests" in s else "")
            + (f"  moved {s['median_wire_share']:.1%}" if "median_wire_share" in s else "")
        )
    ratios: dict[str, Any] = {}
    if "deltalake" in runs:
        dl = summary["deltalake"]
        print("\nvs deltalake (paired medians; > 1 is better for rlcd, except size and RSS):")
        for name in (c for c in contenders if c != "deltalake"):
            mine = {
                "throughput": paired("deltalake", name, "seconds"),
                "work_throughput": paired("deltalake", name, "work_seconds"),
                "cpu": paired("deltalake", name, "cpu_seconds"),
                "work_cpu": paired("deltalake", name, "work_cpu_seconds"),
                "output_size": summary[name]["output_mib"] / dl["output_mib"],
                "peak_rss": summary[name]["peak_rss_mib"] / dl["peak_rss_mib"],
            }
            ratios[name] = mine
            print(
                f"  {name:17s} throughput {mine['throughput']:.2f}x "
                f"(compaction alone {mine['work_throughput']:.2f}x), CPU {mine['cpu']:.2f}x "
                f"({mine['work_cpu']:.2f}x), "
                f"output {mine['output_size']:.2f}x, peak RSS {mine['peak_rss']:.2f}x"
            )
    return {"summary": summary, "ratios": ratios}


_FILE_BYTES = {
    "bench": 1.7 * 2**20,
    "skewed": 5.0 * 2**20,
    "fixture": 0.34 * 2**20,
    "medium": 1.7 * 2**20,
    "medium-pyarrow": 1.7 * 2**20,
    "random": 2.5 * 2**20,
}
"""Bytes of one 50k-row file of each shape."""


def memory(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """Peak RSS of one rlcd bin per bin size (single-commit tables of ``--shape``)."""
    sizes = [float(s) for s in args.bin_gib.split(",")]
    names = [c for c in args.contenders.split(",") if c.startswith("rlcd")] or ["rlcd"]
    per_file = _FILE_BYTES[args.shape] * args.rows / 50_000
    results: dict[str, Any] = {}
    for gib in sizes:
        table = scratch / f"table-{gib}"
        files = max(1, round(gib * 2**30 / per_file))
        t0 = time.perf_counter()
        if args.shape.startswith("medium"):  # batch writers' files, their row groups copied
            generate(table, files, args.rows, args.shape)
        else:
            generate_one_commit(table, files, args.rows, args.shape)
        size = sum(_parquet_sizes(table).values())
        print(
            f"{gib} GiB: {files} files, {size / 2**30:.2f} GiB "
            f"(generated in {time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
        runner = Local(table, scratch)
        target = int(size * 1.1) + TARGET  # one bin holds the whole table
        results[str(gib)] = {"input_bytes": size}
        for name in names:
            runs = []
            for _ in range(args.repeat):
                run = runner.measure(name, target)
                runs.append(run)
                print(f"  {_line(name, run)}", flush=True)
            peak = max(r["max_rss_kib"] for r in runs) / 1024
            results[str(gib)][name] = {"peak_rss_mib": peak, "runs": runs}
        shutil.rmtree(table)
    growth = {}
    print("\nbin GiB  " + "  ".join(f"{n:>14}" for n in names) + "  (peak RSS MiB)")
    for gib in sizes:
        peaks = (results[str(gib)][n]["peak_rss_mib"] for n in names)
        print(f"{gib:7.1f}  " + "  ".join(f"{p:14.0f}" for p in peaks))
    for name in names:
        first, last = (results[str(s)][name]["peak_rss_mib"] for s in (sizes[0], sizes[-1]))
        growth[name] = last / first - 1
        change = f"{growth[name] * 100:+.1f}%"
        print(f"{name}: growth {sizes[0]} -> {sizes[-1]} GiB {change} (bar < 20%)")
    return {"bins": results, "growth": growth}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        name, uri, target, result = sys.argv[2:6]
        child(name, uri, int(target), Path(result))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--imports-only":
        name, where, result = sys.argv[2:5]
        imports_only(name, where == "s3", Path(result))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="bench")
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--contenders", default=DEFAULT_CONTENDERS)
    parser.add_argument("--s3", action="store_true", help="compact on a moto server")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument(
        "--count-bytes",
        action="store_true",
        help="--s3: count the bytes each contender moves to and from S3, at a proxy",
    )
    parser.add_argument("--bin-gib", help="comma-separated bin sizes: peak RSS per size")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--evict-libraries",
        action="store_true",
        help="first drop the environment's shared libraries from the page cache (RSS as after "
        "a reboot, not as pip wrote them)",
    )
    args = parser.parse_args()
    unknown = set(args.contenders.split(",")) - set(CONTENDERS)
    if unknown or (args.s3 and "floor" in args.contenders):
        raise SystemExit(f"unknown contenders {sorted(unknown)} (floor runs locally only)")
    suffix = f"-{args.shape}" + ("-memory" if args.bin_gib else "-s3" if args.s3 else "")
    out = args.out or Path(__file__).parent / "out" / f"compact{suffix}.json"
    # rlcd's bytecode, as a pip install leaves it: without it (an editable install under
    # PYTHONDONTWRITEBYTECODE) every run would compile rlcd's modules again (~0.4 s)
    compileall.compile_dir(Path(__file__).resolve().parents[1] / "rlcd", quiet=1)
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="rlcd-bench-") as tmp:
        scratch = Path(tmp)
        if args.bin_gib:
            report = memory(args, scratch)
        else:
            table = scratch / "table"
            t0 = time.perf_counter()
            generate(table, args.files, args.rows, args.shape)
            size = sum(_parquet_sizes(table).values())
            print(
                f"{args.shape} table: {args.files} files x {args.rows} rows, "
                f"{size / 2**20:.1f} MiB (generated in {time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
            if args.s3:
                from s3env import S3Bench

                with S3Bench(args.latency_ms, count_bytes=args.count_bytes).running() as s3:
                    report = compare(args, Remote(s3, table), size)
            else:
                report = compare(args, Local(table, scratch), size)
            report.update(input_bytes=size)
    end = os.getloadavg()
    print(f"load average at end: {end[0]:.1f} {end[1]:.1f} {end[2]:.1f}")
    report.update(vars(args) | {"out": str(out), "load_start": load, "load_end": end})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
