"""What a killed ``rlcd compact`` leaves behind, and how the next runs deal with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import deltalake
import numpy as np
import pyarrow as pa
import pytest

from rlcd.delta.names import data_file_name, rlcd_file_uuid
from rlcd.storage._local import is_temp_name
from tests.contract.support import boto_client
from tests.e2e.test_cli import rlcd
from tests.integration.tables import S3Mirror, append, delta_rs_rows, partitioned

pytestmark = pytest.mark.e2e


def big_table(path: Path, files: int = 20, rows: int = 50_000) -> None:
    """Files of random numbers and strings: slow enough to rewrite that a run can be caught
    mid-write."""
    rng = np.random.default_rng(7)
    for i in range(files):
        ids = np.arange(i * rows, (i + 1) * rows)
        strings = pa.array(rng.integers(0, 1 << 40, rows)).cast(pa.string())
        append(path, pa.table({"id": ids, "x": rng.random(rows), "s": strings}))


def content(table: Path) -> pa.Table:
    """The rows through delta-rs, in id order (ids are unique)."""
    read = pa.table(deltalake.DeltaTable(str(table)).scan().read_all())
    return pa.table({"id": read["id"], "x": read["x"], "s": read["s"].cast(pa.string())}).sort_by(
        "id"
    )


def temp_files(table: Path) -> list[Path]:
    """The outputs' temp files (not the lease's, which the run writes first under ``_rlcd``)."""
    return [p for p in table.rglob("*") if is_temp_name(p.name) and "_rlcd" not in p.parts]


def start_compact(table: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rlcd", "compact", str(table), "--target-size", "8MiB", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def when_writing(process: subprocess.Popen[str], table: Path) -> list[Path]:
    """Wait until the run has an output half written (a temp file exists); fails if the run
    ends first."""
    while not (found := temp_files(table)):
        assert process.poll() is None, "the run finished before writing was seen"
        time.sleep(0.005)
    return found


def _age(table: Path, hours: float) -> None:
    when = time.time() - hours * 3600
    for path in table.rglob("*"):
        os.utime(path, (when, when))


def unreferenced_rlcd_files(table: Path) -> list[str]:
    log_text = "".join(p.read_text() for p in (table / "_delta_log").glob("*.json"))
    return [
        p.name
        for p in table.rglob("*")
        if rlcd_file_uuid(p.name) is not None and p.name not in log_text
    ]


def test_kill_9_leftovers_are_removed_by_a_later_run_past_the_grace(tmp_path: Path) -> None:
    """`kill -9` mid-compaction leaves partial outputs; the next run keeps them while they are
    younger than the grace period (they may be another run's), a run after the grace removes
    them and says so, and the table reads the same rows throughout."""
    table = tmp_path / "t"
    big_table(table)
    rows = content(table)
    process = start_compact(table)
    when_writing(process, table)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    left = temp_files(table) + [table / n for n in unreferenced_rlcd_files(table)]
    assert left, "the kill left nothing: the reproduction did not reproduce"
    assert content(table).equals(rows)

    young = rlcd("compact", str(table), "--dry-run")
    assert young.returncode == 0, young.stderr
    assert all(p.exists() for p in left) and "leftovers of" not in young.stdout

    _age(table, 2)
    done = rlcd("compact", str(table), "--target-size", "8MiB")
    assert done.returncode == 0, done.stderr
    assert "removed leftovers of earlier runs older than 1h" in done.stdout, done.stdout
    assert not any(p.exists() for p in left)
    assert temp_files(table) == [] and unreferenced_rlcd_files(table) == []
    assert content(table).equals(rows)


def test_orphan_grace_is_a_duration(tmp_path: Path) -> None:
    """--orphan-grace takes a duration; anything else is a usage error (exit 2)."""
    table = tmp_path / "t"
    big_table(table, files=2, rows=10)
    bad = rlcd("compact", str(table), "--orphan-grace", "soon")
    assert bad.returncode == 2 and "--orphan-grace" in bad.stderr
    ok = rlcd("compact", str(table), "--orphan-grace", "90s", "--dry-run")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.integration
def test_s3_leftovers_are_removed_by_the_next_run(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """On S3, a killed run's unfinished multipart upload and its complete but uncommitted
    output are removed by the next `rlcd compact` past the grace period, and it says so;
    another writer's upload stays, and so do the table's rows."""
    partitioned(tmp_path / "t")
    uri = S3Mirror(moto_endpoint, s3_bucket).upload(tmp_path / "t", "w/t")
    boto = boto_client(moto_endpoint)
    ours = f"w/t/part=a/{data_file_name('zstd', os.urandom(16))}"
    boto.create_multipart_upload(Bucket=s3_bucket, Key=ours)
    foreign = boto.create_multipart_upload(Bucket=s3_bucket, Key="w/t/part=a/part-x.parquet")
    boto.put_object(
        Bucket=s3_bucket, Key=f"w/t/{data_file_name('zstd', os.urandom(16))}", Body=b"x"
    )
    env = {"AWS_ENDPOINT_URL_S3": moto_endpoint, "AWS_REGION": "us-east-1"}
    young = rlcd("compact", uri, "--dry-run", env=env)  # moto dates every upload 2010
    assert young.returncode == 0, young.stderr
    assert (
        "would remove leftovers of earlier runs older than 1h: 0 uncommitted files" in young.stdout
    )
    done = rlcd("compact", uri, "--orphan-grace", "0s", env=env)
    assert done.returncode == 0, done.stderr
    assert "1 uncommitted file (1 B), 1 unfinished upload" in done.stdout, done.stdout
    uploads = boto.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", [])
    assert [u["UploadId"] for u in uploads] == [foreign["UploadId"]]
    back = S3Mirror(moto_endpoint, s3_bucket).download("w/t", tmp_path / "back")
    assert delta_rs_rows(back) == delta_rs_rows(tmp_path / "t")
