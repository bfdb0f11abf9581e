"""The rlcd CLI in a subprocess, as a user runs it (the e2e and Spark tests' one way to call it)."""

from __future__ import annotations

import os
import subprocess
import sys


def rlcd(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rlcd ARGS`` with this environment plus ``env``; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "rlcd", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
