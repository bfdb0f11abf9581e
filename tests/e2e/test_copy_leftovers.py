"""``kill -9`` of an ``rlcd compact`` that copies row groups (issue 39's copy path): wherever the
run dies, the table reads back with exactly its rows, and the next run removes what the killed
one left. The sources are delta-rs files of one ~8.8 MB row group each, which the default
policy copies."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.delta.names import rlcd_file_uuid
from tests.contract.faultproxy import Fault, FaultProxy
from tests.contract.support import boto_client
from tests.e2e.cli import rlcd
from tests.e2e.commit_hold import FileHold
from tests.e2e.test_leftovers import temp_files, unreferenced_rlcd_files
from tests.integration.tables import S3Mirror, append

pytestmark = pytest.mark.e2e

ROWS = 400_000
"""Rows per source: two random float columns make one row group of ~8.8 MB, above the default
``min_copy_row_group`` (4 MiB)."""
TARGET = ("--target-size", "256MiB")
"""Every source is small against it: one bin per partition."""


def copyable(path: Path, files: int, parts: str) -> None:
    """``files`` delta-rs appends of :data:`ROWS` rows, taking turns between the partitions
    ``parts`` names (one letter each)."""
    rng = np.random.default_rng(39)
    for i in range(files):
        append(
            path,
            pa.table(
                {
                    "id": np.arange(i * ROWS, (i + 1) * ROWS),
                    "x": rng.random(ROWS),
                    "y": rng.random(ROWS),
                    "part": [parts[i % len(parts)]] * ROWS,
                }
            ),
            partition_by=["part"],
        )


def content(path: Path) -> pa.Table:
    """The table's rows through delta-rs, in id order (ids are unique)."""
    read = pa.table(deltalake.DeltaTable(str(path)).scan().read_all())
    columns = {name: read[name] for name in ("id", "x", "y")}
    return pa.table({**columns, "part": read["part"].cast(pa.string())}).sort_by("id")


def _start(table: str, env: dict[str, str], tmp: Path) -> subprocess.Popen[str]:
    """The run to kill, its temp files (the encoded file's, outside the table) in ``tmp``."""
    tmp.mkdir()
    return subprocess.Popen(
        [sys.executable, "-m", "rlcd", "compact", table, *TARGET],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env, "TMPDIR": str(tmp)},
    )


def _kill_when(process: subprocess.Popen[str], seen: Callable[[], bool]) -> None:
    """``kill -9`` the run once ``seen()``; fails if the run ends first."""
    deadline = time.monotonic() + 120
    while not seen():
        assert process.poll() is None, "the run ended before the kill point: " + str(
            process.communicate()
        )
        assert time.monotonic() < deadline, "the kill point was never reached"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL


def _copied(stdout: str) -> None:
    """The run copied row groups in every bin (its report says so per bin)."""
    counts = [int(n) for n in re.findall(r"(\d+) row groups? copied", stdout)]
    assert counts and all(counts), stdout


def _copied_output(path: Path, sources: int) -> None:
    """An output holds its sources' row groups as they were: one each, and the sources' codec
    (delta-rs's snappy), where a re-encoded one would be rlcd's zstd."""
    meta = pq.read_metadata(path)
    assert meta.num_row_groups == sources
    codecs = {meta.row_group(g).column(c).compression for g in range(sources) for c in range(3)}
    assert codecs == {"SNAPPY"}


@pytest.mark.parametrize("at", ["copy", "commit"], ids=["mid-write", "before-commit"])
def test_kill_9_of_a_copy_leaves_nothing_after_the_next_run(
    tmp_path: Path, at: Literal["copy", "commit"]
) -> None:
    """Killed with an output half copied (its temp file holds its first row group only), or
    with both outputs written and the commit put not yet made: the table reads the same rows,
    and the next run removes the temp file or the uncommitted outputs, says so, and copies."""
    table = tmp_path / "t"
    copyable(table, files=8, parts="ab")
    rows = content(table)
    (tmp_path / "hold").mkdir()
    hold = FileHold(tmp_path / "hold", at=at)
    process = _start(str(table), hold.env(), tmp_path / "tmp")
    _kill_when(process, lambda: (hold.folder / "held").exists())
    temps = temp_files(table)
    outputs = unreferenced_rlcd_files(table)
    if at == "copy":  # the copied ranges are whole row groups: 4 sources of ~8.8 MB each
        sizes = [p.stat().st_size for p in temps]  # the other bin's may be still empty
        assert any(sizes) and all(size < 4 * 8_000_000 for size in sizes), sizes
        assert outputs == []
    else:
        assert temps == [] and len(outputs) == 2
        for name in outputs:
            _copied_output(next(table.rglob(name)), sources=4)
    assert content(table).equals(rows)

    scratch = list((tmp_path / "tmp").iterdir())  # the killed run's scratch folder
    assert [p.name.split("-")[:2] for p in scratch] == [["rlcd", str(process.pid)]]
    done = rlcd(
        "compact",
        str(table),
        *TARGET,
        "--orphan-grace",
        "0s",
        env={"TMPDIR": str(tmp_path / "tmp")},
    )
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # its folder went, and so did the run's own
    left = f"{len(temps)} temp file" if at == "copy" else "2 uncommitted files"
    assert "removed leftovers of earlier runs" in done.stdout and left in done.stdout, done.stdout
    _copied(done.stdout)
    assert temp_files(table) == [] and unreferenced_rlcd_files(table) == []
    assert content(table).equals(rows)


_S3_POINTS = {
    "mid-upload": ("PUT", "partNumber=2"),
    "completing": ("POST", "uploadId="),
    "before-commit": ("PUT", "/_delta_log/0"),
}
"""Where the S3 run is killed: the request the proxy never forwards (method, path part)."""


@pytest.mark.integration
@pytest.mark.parametrize("point", list(_S3_POINTS))
def test_s3_kill_9_of_a_copy_leaves_nothing_after_the_next_run(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, point: str
) -> None:
    """On moto: the run is killed while the proxy keeps one request of its copied output
    from S3 (the second part, the completion of the upload, or the commit put). The table
    reads the same rows; the next run aborts the unfinished upload or deletes the complete
    uncommitted output, says so, and copies."""
    copyable(tmp_path / "src", files=4, parts="a")
    mirror = S3Mirror(moto_endpoint, s3_bucket)
    uri = mirror.upload(tmp_path / "src", "w/t")
    rows = content(tmp_path / "src")
    s3 = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing"}
    s3 |= {"AWS_SECRET_ACCESS_KEY": "testing"}
    method, contains = _S3_POINTS[point]
    with FaultProxy(moto_endpoint, hang_s=600).running() as proxy:
        proxy.inject(Fault.HANG, method=method, contains=contains)
        process = _start(uri, {**s3, "AWS_ENDPOINT_URL": proxy.url}, tmp_path / "tmp")
        _kill_when(process, lambda: proxy.count(method, contains) > 0)
    # the proxy is closed: the request it kept never reaches S3
    uploads = mirror.multipart_uploads()
    back = mirror.download("w/t", tmp_path / "back")
    outputs = unreferenced_rlcd_files(back)
    if point == "before-commit":
        assert uploads == 0 and len(outputs) == 1
        _copied_output(next(back.rglob(outputs[0])), sources=4)
    else:
        assert uploads >= 1 and outputs == []
    assert content(back).equals(rows)

    done = rlcd(
        "compact",
        uri,
        *TARGET,
        "--orphan-grace",
        "0s",
        env={**s3, "AWS_ENDPOINT_URL": moto_endpoint},
    )
    assert done.returncode == 0, done.stderr
    left = "1 uncommitted file" if point == "before-commit" else "1 unfinished upload"
    assert "removed leftovers of earlier runs" in done.stdout and left in done.stdout, done.stdout
    _copied(done.stdout)
    assert mirror.multipart_uploads() == 0
    listing = boto_client(moto_endpoint).list_objects_v2(Bucket=s3_bucket, Prefix="w/t/")
    back = mirror.download("w/t", tmp_path / "back")
    assert unreferenced_rlcd_files(back) == []
    assert sum(1 for o in listing["Contents"] if rlcd_file_uuid(o["Key"].rpartition("/")[2])) == 1
    assert content(back).equals(rows)
