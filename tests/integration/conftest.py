"""Fixtures of the integration tests, and the long runs' summary of the random interleavings."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.races import RaceTable, local_table, s3_table


@pytest.fixture(params=["local", "s3"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., RaceTable]:
    """Builds the test's table on local disk or on moto's S3."""
    if request.param == "local":
        return lambda files=4, partitioned=False: local_table(
            tmp_path / "t", files, partitioned=partitioned
        )
    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    return lambda files=4, partitioned=False: s3_table(
        tmp_path, endpoint, bucket, files, partitioned=partitioned
    )


TALLY = "interleavings"
"""The name of the ``user_properties`` entry a random interleaving records its tally in (the
reports carry it to the controller under pytest-xdist too)."""


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """With ``--seeds``, print the tally of the random interleavings, summed over the run."""
    if config.getoption("seeds") is None:
        return
    tally: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) == "call":
                for name, value in report.user_properties:
                    if name == TALLY:
                        tally.update(value)
    terminalreporter.section("random interleavings")
    for key, count in sorted(tally.items()):
        terminalreporter.write_line(f"{count:8d}  {key}")
