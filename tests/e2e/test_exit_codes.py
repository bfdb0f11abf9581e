"""A run that finished its work exits with its own code, every time (pyarrow's abort at
interpreter exit once turned a finished run into exit 134 now and then)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.e2e.test_cli import rlcd

pytestmark = pytest.mark.e2e

TABLES = (
    "basic-dv-with-checkpoint",
    "multi-part-checkpoint",
    "v2-checkpoint-parquet",
    "v2-checkpoint-json",
)
ROUNDS = 4  # x 4 tables x 2 commands = 32 runs; bench/exit_codes.py runs many more


def test_many_short_runs_all_exit_cleanly(copy_fixture: Any) -> None:
    """Dry-run compactions and file verifications of tables with classic, multi-part and V2
    checkpoints, run again and again, all exit 0 with nothing on stderr."""
    tables = [copy_fixture(name) for name in TABLES]
    jobs = [
        (command, str(table))
        for _ in range(ROUNDS)
        for table in tables
        for command in (("compact", "--dry-run"), ("verify", "--files-only"))
    ]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda job: rlcd(job[0][0], job[1], *job[0][1:]), jobs))
    failed = [
        (job, run.returncode, run.stderr[-300:])
        for job, run in zip(jobs, runs, strict=True)
        if run.returncode
    ]
    assert failed == []
    assert all(run.stderr == "" for run in runs)
