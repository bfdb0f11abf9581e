"""Discovery of the Delta tables under a prefix: depth, include and exclude rules, and one
listing per table found rather than a walk of its data files."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcd.daemon import discover
from rlcd.daemon.config import DiscoverEntry
from rlcd.daemon.discover import discover_tables
from rlcd.storage import LocalStore
from rlcd.storage.metered import MeteredStore
from rlcd.storage.uri import TableUri
from tests.integration.tables import append, batch

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.mark.parametrize("skip", [1000, 1])
async def test_discovery_applies_depth_and_globs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skip: int
) -> None:
    """Tables up to max_depth that match an include and no exclude are found, sorted; a table
    at the prefix itself and a directory without a log are not tables below it. Small tables
    cost one listing in all; past the skip limit the listing restarts after the table."""
    monkeypatch.setattr(discover, "SKIP_BEFORE_RESTART", skip)
    for name in ("a", "b/c", "b/d/e", "tmp_x", "deep/1/2/3"):
        for i in range(3):
            append(tmp_path / name, batch(i, 1))
    append(tmp_path, batch(0, 1))  # the prefix itself
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.parquet").write_bytes(b"x")
    prefix = TableUri.parse(str(tmp_path))
    entry = DiscoverEntry(prefix, exclude=("tmp_*",), max_depth=3)
    async with MeteredStore(LocalStore(tmp_path)) as store:
        found = await discover_tables(store, entry)
        assert [str(u) for u in found] == [
            str(TableUri.parse(str(tmp_path / n))) for n in ("a", "b/c", "b/d/e")
        ]
        if skip == 1000:
            assert store.requests["list"] == 1
        else:  # one restart past each table below the prefix
            assert store.requests["list"] == 1 + 5
