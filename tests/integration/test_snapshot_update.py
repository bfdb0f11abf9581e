"""Loading at a version, and moving a held snapshot forward by reading only the new commits."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from rlcd.delta.load import (
    advance_snapshot,
    list_log,
    load_snapshot,
    read_commits_after,
    update_snapshot,
)
from rlcd.errors import CorruptLogError
from rlcd.storage import LocalStore
from rlcd.storage.base import ObjectMeta
from tests.integration.tables import append, batch

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


class CountingStore(LocalStore):
    """A local store that records the keys it reads (alone or many at once) and the prefixes it
    lists."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets: list[str] = []
        self.lists: list[tuple[str, str | None]] = []

    async def get(self, key: str, *, start: int | None = None, end: int | None = None) -> bytes:
        self.gets.append(key)
        return await super().get(key, start=start, end=end)

    def list(self, prefix: str, *, start_after: str | None = None) -> AsyncIterator[ObjectMeta]:
        self.lists.append((prefix, start_after))
        return super().list(prefix, start_after=start_after)

    async def get_many(self, keys: Sequence[str]) -> list[bytes]:
        self.gets.extend(keys)
        return await super().get_many(keys)


async def test_update_reads_only_new_commits(tmp_path: Path) -> None:
    """update_snapshot lists from the held version and reads just the commits after it; the
    result equals a fresh load; an up-to-date snapshot costs one listing and no reads."""
    for i in range(3):
        append(tmp_path, batch(i * 10, 10))
    async with CountingStore(tmp_path) as store:
        held = await load_snapshot(store)
        assert held.version == 2
        for i in range(3, 5):
            append(tmp_path, batch(i * 10, 10))
        store.gets.clear()
        store.lists.clear()
        updated = await update_snapshot(store, held)
        assert store.gets == [f"_delta_log/{v:020d}.json" for v in (3, 4)]
        assert store.lists == [("_delta_log/", f"_delta_log/{3:020d}")]
        fresh = await load_snapshot(store)
        assert updated.version == fresh.version == 4
        assert dict(updated.files) == dict(fresh.files)
        store.gets.clear()
        store.lists.clear()
        assert await update_snapshot(store, updated) is updated
        assert store.gets == [] and len(store.lists) == 1
        assert len(held.files) == 3, "the held snapshot is not modified"


async def test_load_at_a_version(tmp_path: Path) -> None:
    """A snapshot at an older version sees the files live then."""
    for i in range(4):
        append(tmp_path, batch(i * 10, 10))
    async with LocalStore(tmp_path) as store:
        assert [len((await load_snapshot(store, version=v)).files) for v in range(4)] == [
            1,
            2,
            3,
            4,
        ]


async def test_commits_after_a_version_are_read_by_key(tmp_path: Path) -> None:
    """The commits after a version, read one key after the other up to the first missing one,
    without listing; a commit missing below one known to exist is a corrupt log, named."""
    for i in range(4):
        append(tmp_path, batch(i * 10, 10))
    async with CountingStore(tmp_path) as store:
        commits = await read_commits_after(store, 1, through=2, table=store.root)
        assert [v for v, _ in commits] == [2, 3]
        assert store.lists == []
        (tmp_path / "_delta_log" / f"{2:020d}.json").unlink()
        with pytest.raises(CorruptLogError, match="missing, though commit 3 exists") as info:
            await read_commits_after(store, 1, through=3, table=store.root)
        assert info.value.version == 2


class _NotLocal(LocalStore):
    """A local store read as a remote one: each commit is a GET of its own."""

    def local_files(self) -> None:
        """Not local."""


@pytest.mark.parametrize("store_class", [LocalStore, _NotLocal])
async def test_a_listed_commit_gone_before_its_read_is_a_corrupt_log(
    tmp_path: Path, store_class: type[LocalStore]
) -> None:
    """A commit the listing showed but that cannot be read is named, whether the commits are
    read one GET each or all at once; the ones that read give the same snapshot either way."""
    for i in range(4):
        append(tmp_path, batch(i * 10, 10))
    async with store_class(tmp_path) as store:
        held = await load_snapshot(store, version=1)
        paths = await list_log(store, after_version=2)
        assert (await advance_snapshot(store, held, paths)).version == 3
        (tmp_path / "_delta_log" / f"{3:020d}.json").unlink()
        with pytest.raises(CorruptLogError, match="commit file is missing") as info:
            await advance_snapshot(store, held, paths)
        assert info.value.version == 3 and info.value.path == f"_delta_log/{3:020d}.json"
