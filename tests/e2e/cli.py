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


def in_command(
    probe: str, *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``probe`` (Python statements) as the command's work: the entry point
    ``rlcd.cli.main.run`` makes its process settings, then runs ``probe`` in place of ``main``.
    ``env`` replaces the environment; output captured as text."""
    body = "".join(f"    {line}\n" for line in probe.splitlines())
    script = (
        f"import rlcd.cli.main\ndef main():\n{body}    return 0\n"
        "rlcd.cli.main.main = main\nrlcd.cli.main.run()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else dict(os.environ),
    )
