"""Discovery of the Delta tables under a prefix: depth, include and exclude rules, one
listing per table found rather than a walk of its data files, and a prefix holding nothing
told apart (and warned of once by the daemon)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rlcd.daemon import discover
from rlcd.daemon.config import DiscoverEntry, parse_settings
from rlcd.daemon.discover import Discovered, discover_tables
from rlcd.daemon.supervise import Limits, Supervisor
from rlcd.storage import LocalStore, S3Client, S3Config
from rlcd.storage.base import ObjectStore
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
        assert not found.empty
        assert [str(u) for u in found.tables] == [
            str(TableUri.parse(str(tmp_path / n))) for n in ("a", "b/c", "b/d/e")
        ]
        if skip == 1000:
            assert store.requests["list"] == 1
        else:  # one restart past each table below the prefix
            assert store.requests["list"] == 1 + 5


async def test_a_prefix_that_holds_nothing_is_told_apart(tmp_path: Path) -> None:
    """A directory that does not exist is empty; one holding files but no table is not."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "x.parquet").write_bytes(b"x")
    for name, empty in (("missing", True), ("plain", False)):
        entry = DiscoverEntry(TableUri.parse(str(tmp_path / name)))
        async with LocalStore(tmp_path / name) as store:
            assert await discover_tables(store, entry) == Discovered((), empty)


async def test_an_s3_prefix_without_objects_is_empty(moto_endpoint: str, s3_bucket: str) -> None:
    """On S3 a prefix with no object under it is empty (a prefix sharing only its start with
    a key is no exception)."""
    config = S3Config(endpoint_url=moto_endpoint, region="us-east-1", addressing_style="path")
    async with S3Client(config) as client:
        await client.store(TableUri.parse(f"s3://{s3_bucket}")).put("tablesX/a", b"x")
        prefix = TableUri.parse(f"s3://{s3_bucket}/tables")
        assert await discover_tables(client.store(prefix), DiscoverEntry(prefix)) == Discovered(
            (), True
        )


async def test_the_daemon_warns_once_of_a_prefix_that_holds_nothing(tmp_path: Path) -> None:
    """A [[discover]] prefix that holds nothing is warned of once, naming it, however often it
    is listed again; once a table appears there it is watched, and no more is said."""
    settings = parse_settings(
        '[daemon]\npoll_interval = "50ms"\n[metrics]\nlisten = ""\n'
        '[[discover]]\nprefix = "tables"\ninterval = "50ms"\n',
        source="test.toml",
        base_dir=str(tmp_path),
    )
    stores: list[MeteredStore] = []

    def store_for(uri: TableUri) -> ObjectStore:
        stores.append(MeteredStore(LocalStore(uri.prefix)))
        return stores[-1]

    def listings() -> int:
        return sum(s.requests["list"] for s in stores)

    supervisor = Supervisor(settings, store_for=store_for, limits=Limits.of(settings))
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(supervisor.run)
            with anyio.fail_after(60):
                await until(lambda: listings() >= 3)
                append(tmp_path / "tables" / "t", batch(0, 10))
                await until(lambda: len(supervisor.status()) == 1)
                seen = listings()
                await until(lambda: listings() >= seen + 2)
            supervisor.stop()
    warnings = [e for e in logs if e["event"] == "discover_prefix_empty"]
    assert len(warnings) == 1, warnings
    assert warnings[0]["discover"] == "discover[0]"
    assert warnings[0]["prefix"] == str(TableUri.parse(str(tmp_path / "tables")))
    assert warnings[0]["log_level"] == "warning" and "does not exist" in warnings[0]["error"]


async def until(check: Callable[[], bool]) -> None:
    while True:
        if check():
            return
        await anyio.sleep(0.02)
