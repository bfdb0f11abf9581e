"""What the ``rlcd`` command imports before it does anything: a one-shot command pays only
for the stack its table needs."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import fixture_table
from tests.e2e.cli import in_command, rlcd
from tests.integration.tables import partitioned

pytestmark = pytest.mark.e2e

S3_STACK = ("aiobotocore", "aiohttp", "botocore", "rlcd.storage.s3")


def imported(*args: str) -> set[str]:
    """Every module ``python -X importtime -m rlcd *args`` imports (its importtime lines)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rlcd", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    names = {line.rsplit("|", 1)[1].strip() for line in lines[1:]}  # [0] is the header
    assert "rlcd.cli.main" in names
    return names


def _under(names: set[str], packages: tuple[str, ...]) -> set[str]:
    return {n for n in names if n in packages or n.startswith(tuple(p + "." for p in packages))}


def test_help_imports_neither_s3_nor_arrow() -> None:
    """``rlcd --help`` imports no aiobotocore, aiohttp or botocore, no pyarrow and no
    compaction module but the pure policy (its codecs and sizes, no dependencies) and the
    reports' words: it reads its arguments before loading any of them."""
    names = imported("--help")
    assert _under(names, (*S3_STACK, "pyarrow", "numpy")) == set()
    assert _under(names, ("rlcd.compaction",)) <= {
        "rlcd.compaction",
        "rlcd.compaction.policy",
        "rlcd.compaction.words",
    }


def test_help_sets_up_no_logging_and_opens_no_store() -> None:
    """``rlcd --help`` imports neither the logging set-up (structlog and the asyncio it pulls
    in) nor the storage package: both come after the arguments are read."""
    names = imported("--help")
    assert _under(names, ("structlog", "asyncio", "rlcd.daemon", "rlcd.storage")) == set()


def test_help_reads_no_package_metadata() -> None:
    """``rlcd --help`` does not import importlib.metadata: the version is a literal."""
    assert "importlib.metadata" not in imported("--help")


def test_version_is_the_installed_one() -> None:
    """``rlcd --version`` prints the installed distribution's version."""
    done = rlcd("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"rlcd {importlib.metadata.version('rlcd')}\n"


def test_local_compaction_imports_no_s3_module(tmp_path: Path) -> None:
    """Compacting a local table commits without importing the S3 backend or its stack, and
    without --where it imports no predicate parser."""
    partitioned(tmp_path)
    names = imported("compact", str(tmp_path))
    assert "rlcd.compaction.rewrite" in names  # it did compact
    assert _under(names, S3_STACK) == set()
    assert "rlcd.delta.predicate" not in names


def test_the_command_loads_none_of_pyarrows_remote_filesystems() -> None:
    """The command's process settings keep ``pyarrow.fs`` from loading pyarrow's S3, GCS, Azure
    and HDFS filesystems (and, seen in Linux's memory map, ``libarrow_s3``); pyarrow.parquet
    still works."""
    probe = (
        "import sys, pyarrow as pa, pyarrow.parquet as pq\n"
        "sink = pa.BufferOutputStream(); pq.write_table(pa.table({'a': [1]}), sink)\n"
        "assert pq.read_table(pa.BufferReader(sink.getvalue()))['a'].to_pylist() == [1]\n"
        "remote = ('_s3fs', '_gcsfs', '_azurefs', '_hdfs')\n"
        "loaded = [n for n in remote if sys.modules[f'pyarrow.{n}'] is not None]\n"
        "maps = open('/proc/self/maps').read() if sys.platform == 'linux' else ''\n"
        "print(loaded, 'libarrow_s3' in maps)"
    )
    done = in_command(probe, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "[] False\n"


def test_reading_a_checkpoint_builds_no_dataset(tmp_path: Path) -> None:
    """A checkpoint is one Parquet file, read as one: pyarrow.dataset is not imported."""
    table = tmp_path / "t"
    shutil.copytree(fixture_table("basic-dv-with-checkpoint"), table)
    names = imported("verify", str(table))
    assert "rlcd.delta._checkpoint" in names  # it did read the checkpoint
    assert "pyarrow.dataset" not in names
