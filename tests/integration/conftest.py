"""Fixtures of the integration tests."""

from __future__ import annotations

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
