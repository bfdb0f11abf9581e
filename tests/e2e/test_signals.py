"""``rlcd compact`` stopped by a signal, and writing into a pipe that closes early."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_leftovers import (
    big_table,
    content,
    start_compact,
    temp_files,
    unreferenced_rlcd_files,
    when_writing,
)

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_abandons_the_bins_and_leaves_nothing(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    """SIGTERM and SIGINT mid-write cancel the bins in flight: their outputs are deleted at
    once, nothing is committed, one line says what was abandoned (the bins really in flight,
    at most the run's concurrency, apart from those not started; temp files, as on local
    disk), no traceback; exit 143 or 130."""
    table = tmp_path / "t"
    big_table(table)
    rows = content(table)
    log = sorted(p.name for p in (table / "_delta_log").iterdir())
    process = start_compact(table)
    when_writing(process, table)
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    assert process.returncode == code, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    stopped = re.fullmatch(
        rf"rlcd: stopped by {signum.name}: abandoned (\d+) bins \((\d+) in flight"
        r"(?:, (\d+) rewritten)?(?:, (\d+) not started)?; outputs and temp files deleted\); "
        r"nothing was committed",
        lines[0],
    )
    assert stopped is not None, lines[0]
    total, in_flight, rewritten, waiting = (int(n or 0) for n in stopped.groups())
    # the run rewrites one more bin than its cores at once, or every bin when there are at
    # most twice as many as cores (compact_table's default)
    cores = len(os.sched_getaffinity(0))
    at_once = total if cores + 1 < total <= 2 * cores else cores + 1
    assert 1 <= in_flight <= at_once <= total, lines[0]
    assert in_flight + rewritten + waiting == total and out == ""
    assert temp_files(table) == [] and unreferenced_rlcd_files(table) == []
    assert sorted(p.name for p in (table / "_delta_log").iterdir()) == log
    assert content(table).equals(rows)


def test_a_closed_pipe_is_not_a_traceback(tmp_path: Path) -> None:
    """A reader that goes away before rlcd writes (`| head -1` that has already exited) ends
    the run quietly with 141, and the shell's `| head -1` shows one line and no traceback."""
    table = tmp_path / "t"
    big_table(table, files=3, rows=10)
    process = subprocess.Popen(
        [sys.executable, "-m", "rlcd", "compact", str(table), "--dry-run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # no reader left: the first write fails with EPIPE
    err = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(timeout=120) == 141, err
    assert err == ""
    shell = subprocess.run(
        f"{sys.executable} -m rlcd compact {table} --dry-run | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert shell.stdout.startswith("plan for") and shell.stdout.count("\n") == 1
    assert shell.stderr == ""
