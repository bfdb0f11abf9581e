"""The least any copying compactor does on this machine: a table's data bytes copied, with no
Parquet, no plan and no Delta log, to set the copy path's times against (issue 39's bars).

    .venv/bin/python bench/copy_floor.py TABLE [--repeat 3]
    .venv/bin/python bench/copy_floor.py TABLE --s3 [--repeat 2]

Local: every ``*.parquet`` of TABLE copied into one new file by ``os.copy_file_range``, as
rlcd copies row groups (on a file system without shared extents, ext4 here, the kernel copies
the bytes), on a fresh copy of the table each time. ``--s3``: the files uploaded to a moto
server on 127.0.0.1 (``bench/s3env.py``), then copied into outputs of three sources each by
``UploadPartCopy`` alone, three outputs at a time, as rlcd's server-side copies are made.
Prints each run's wall time (and, locally, the kernel's CPU time).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from s3env import BUCKET, S3Bench


def local(table: Path) -> str:
    with tempfile.TemporaryDirectory(dir=table.parent) as scratch:
        copy = Path(scratch) / "t"
        shutil.copytree(table, copy)
        os.sync()
        files = sorted(copy.glob("*.parquet"))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        start = time.perf_counter()
        out = os.open(copy / "floor.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        written = 0
        for path in files:
            source = os.open(path, os.O_RDONLY)
            size = os.fstat(source).st_size
            done = 0
            while done < size:
                done += os.copy_file_range(source, out, size - done, done, written + done)
            written += size
            os.close(source)
        os.close(out)
        seconds = time.perf_counter() - start
        kernel = resource.getrusage(resource.RUSAGE_SELF).ru_stime - before
    return f"copied {written / 2**20:.0f} MiB in {seconds:.2f} s ({kernel:.2f} s kernel)"


def _output(s3: Any, name: str, keys: list[str]) -> None:
    upload = s3.client.create_multipart_upload(Bucket=BUCKET, Key=name)["UploadId"]
    parts = []
    for number, key in enumerate(keys, 1):
        done = s3.client.upload_part_copy(
            Bucket=BUCKET,
            Key=name,
            UploadId=upload,
            PartNumber=number,
            CopySource={"Bucket": BUCKET, "Key": key},
        )
        parts.append({"PartNumber": number, "ETag": done["CopyPartResult"]["ETag"]})
    s3.client.complete_multipart_upload(
        Bucket=BUCKET, Key=name, UploadId=upload, MultipartUpload={"Parts": parts}
    )


def server_side(s3: Any, table: Path, run: int) -> str:
    files = sorted(table.glob("*.parquet"))
    keys = [f"floor/{path.name}" for path in files]
    groups = [keys[i : i + 3] for i in range(0, len(keys), 3)]
    start = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        names = [f"floor-out/{run}-{i}" for i in range(len(groups))]
        list(pool.map(_output, [s3] * len(groups), names, groups))
    seconds = time.perf_counter() - start
    total = sum(path.stat().st_size for path in files)
    return f"UploadPartCopy of {total / 2**20:.0f} MiB in {seconds:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", type=Path)
    parser.add_argument("--s3", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not args.s3:
        for _ in range(args.repeat):
            print(local(args.table), flush=True)
        return
    with S3Bench(0.0).running() as s3:
        for path in sorted(args.table.glob("*.parquet")):
            s3.client.upload_file(str(path), BUCKET, f"floor/{path.name}")
        for run in range(args.repeat):
            print(server_side(s3, args.table, run), flush=True)


if __name__ == "__main__":
    main()
