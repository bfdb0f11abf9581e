"""The shell blocks the docs mark runnable (```sh runnable) run as written and exit 0.

Each page's runnable blocks run in order, each in its own ``bash -e``, in a fresh directory,
with ``TABLE`` naming a local table of small files made here and ``rlcd`` on the PATH running
this checkout. Blocks that install things (``pip install``) are not marked runnable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.markdown import ROOT, blocks, doc_files

pytestmark = pytest.mark.e2e

PAGES = [p for p in doc_files() if any(b.runnable for b in blocks(p.read_text()))]


def _small_table(path: Path) -> None:
    for i in range(12):
        ids = pa.array(range(i * 100, (i + 1) * 100), pa.int64())
        write_deltalake(
            str(path), pa.table({"id": ids, "region": ["eu", "us"] * 50}), mode="append"
        )


def _shim(directory: Path) -> Path:
    """A ``rlcd`` command that runs this checkout with this interpreter."""
    directory.mkdir()
    script = directory / "rlcd"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rlcd "$@"\n')
    script.chmod(0o755)
    return directory


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_runnable_blocks_exit_0(page: Path, tmp_path: Path) -> None:
    table = tmp_path / "table"
    _small_table(table)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "TABLE": str(table),
        "PATH": f"{_shim(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    for block in (b for b in blocks(page.read_text()) if b.runnable):
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", block.text],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        where = f"{page.relative_to(ROOT)}:{block.line}"
        assert done.returncode == 0, f"{where} exited {done.returncode}\n{done.stdout}{done.stderr}"
