#!/usr/bin/env python3
"""The README's two commands: ``python3 bootstrap.py demo`` and ``python3 bootstrap.py test``.

Needs nothing but Python >= 3.11 (and Java 17 for the Spark tier). Creates ``.venv`` beside this
file on first use and installs rlcd (editable) with the extras the command needs: ``demo`` only
the demo extra, ``test`` the demo, test and spark extras; later runs reinstall only when
``pyproject.toml`` changed or the command needs an extra not installed yet. ``test`` alone runs
the main suite, then the Spark tier (``-m spark``) as a second pytest run; any further arguments
go to the command instead (``test -k dv``, ``test -m spark``, ``demo --seconds 60``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".rlcd-installed"
FIXTURES = Path(os.environ.get("RLCD_FIXTURES", ROOT.parent / "shared" / "fixtures" / "delta"))
"""The Delta fixture tables the tests read (tests/conftest.py looks in the same place)."""
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
EXTRAS = {"demo": ("demo",), "test": ("demo", "test", "spark")}
"""The extras each command needs: the demo never pulls in the test tools or Spark (~1.4 GB)."""
WHAT = {
    "demo": "its demo dependencies (a minute)",
    "test": "its test and Spark dependencies (a few minutes)",
}


def _installed(want: str) -> set[str]:
    """The extras the stamp says are installed for this ``pyproject.toml`` (its hash first)."""
    lines = STAMP.read_text().splitlines() if STAMP.exists() else []
    return set(lines[1].split(",")) if len(lines) == 2 and lines[0] == want else set()


def _ensure_venv(command: str) -> Path:
    python = BIN / "python"
    if not python.exists():
        print("bootstrap: creating .venv", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    installed = _installed(want)
    if not set(EXTRAS[command]) <= installed:
        print(f"bootstrap: installing rlcd with {WHAT[command]}", file=sys.stderr)
        pip = [str(python), "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
        # setuptools warns on every editable install that a folder named like the package
        # may shadow it: this checkout is that folder, by design
        quiet = {**os.environ, "PYTHONWARNINGS": "ignore:Editable installation"}
        extras = ",".join(EXTRAS[command])
        subprocess.run([*pip, "install", "-e", f"{ROOT}[{extras}]"], check=True, env=quiet)
        STAMP.write_text(f"{want}\n{','.join(sorted(installed | set(EXTRAS[command])))}\n")
    return python


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"demo", "test"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "test" and not FIXTURES.is_dir():
        print(
            f"bootstrap: the tests read the project's Delta fixture tables, and {FIXTURES} is not "
            "a folder: set RLCD_FIXTURES to the shared/fixtures/delta folder",
            file=sys.stderr,
        )
        return 2
    python = _ensure_venv(command)
    if command == "demo":
        return subprocess.run([str(python), "-m", "rlcd", "demo", *rest], cwd=ROOT).returncode
    pytest = [str(python), "-m", "pytest", "-p", "no:cacheprovider"]
    # the main suite on two workers (6:48 vs 8:28 in one process, 2 cores); Spark in one
    runs = [rest] if rest else [["-m", "not spark", "-n", "2"], ["-m", "spark"]]
    for run in runs:  # the first failing run decides; the Spark tier needs a green main suite
        code = subprocess.run([*pytest, *run], cwd=ROOT).returncode
        if code:
            return code
    if not rest:
        print("bootstrap: the main suite and the Spark tier passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
