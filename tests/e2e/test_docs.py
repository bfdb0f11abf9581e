"""The shell blocks the docs mark runnable (```sh runnable) run as written and exit 0.

Each page's runnable blocks run in order, each in its own ``bash -e``, in a fresh directory,
with ``TABLE`` naming a local table of small files made here and ``rlcd`` on the PATH running
this checkout. The README's install block (```sh install: ``pip install .`` into a venv of its
own) runs too, in the slow test: into a fresh venv, from a copy of this checkout, with the
README's runnable blocks after it in the same shell, as a new user pastes them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.markdown import ROOT, Block, blocks, doc_files

pytestmark = pytest.mark.e2e

PAGES = [p for p in doc_files() if any(b.runnable for b in blocks(p.read_text()))]
README = ROOT / "README.md"
EXTRAS = ("pytest", "moto", "deltalake", "pyspark", "delta-spark", "numpy", "hypothesis")
"""Packages of the demo, test and spark extras: a plain ``pip install .`` brings none."""


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


def _bash(script: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


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
        done = _bash(block.text, cwd=work, env=env)
        where = f"{page.relative_to(ROOT)}:{block.line}"
        assert done.returncode == 0, f"{where} exited {done.returncode}\n{done.stdout}{done.stderr}"


def _session(blocks: list[Block]) -> str:
    """The blocks as one shell session, each announced on stderr (where a failure was)."""
    return "".join(f"echo '== README.md:{b.line}' >&2\n{b.text}" for b in blocks)


def test_readme_quick_start_on_a_fresh_install(tmp_path: Path) -> None:
    """The README's install block puts rlcd, without extras, into a fresh venv of its own, and
    its runnable blocks then work with that rlcd: nothing of this checkout's environment helps.
    Slow: pip builds the package and fetches its dependencies (network or pip's cache): about
    15 s of CPU, 1-1.5 min of wall time on a busy 2-core machine."""
    page = blocks(README.read_text())
    installs = [b for b in page if b.installs]
    assert installs, "README.md has no ```sh install block"
    checkout = tmp_path / "checkout"  # pip writes build/ and *.egg-info into the checkout
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):  # what the package's build reads
        shutil.copy(ROOT / name, checkout)
    shutil.copytree(ROOT / "rlcd", checkout / "rlcd", ignore=shutil.ignore_patterns("__pycache__"))
    table = tmp_path / "table"
    _small_table(table)
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env |= {"HOME": str(home), "TABLE": str(table)}
    work = tmp_path / "work"
    work.mkdir()
    # installed in the checkout, then the runnable blocks in a directory of their own
    session = f"{_session(installs)}cd {work}\n{_session([b for b in page if b.runnable])}"
    done = _bash(session + 'echo "rlcd=$(command -v rlcd)"\n', cwd=checkout, env=env)
    assert done.returncode == 0, f"exited {done.returncode}\n{done.stdout}{done.stderr}"
    command = Path(done.stdout.splitlines()[-1].removeprefix("rlcd="))
    assert command.is_relative_to(home), command  # the fresh venv's, not this checkout's
    listed = subprocess.run(
        [str(command.parent / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "rlcd" in installed and not installed & set(EXTRAS), installed
