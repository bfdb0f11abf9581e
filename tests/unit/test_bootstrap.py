"""``bootstrap.py test`` without the fixture tables stops before installing anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_test_without_fixtures_says_where_to_point(tmp_path: Path) -> None:
    missing = tmp_path / "no-fixtures"
    env = {**os.environ, "RLCD_FIXTURES": str(missing)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bootstrap.py"), "test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert str(missing) in done.stderr
    assert "RLCD_FIXTURES" in done.stderr
