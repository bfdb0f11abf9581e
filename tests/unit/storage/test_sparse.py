"""A sparse copy holds the parts fetched into it at their offsets, zeros elsewhere, and is
deleted on exit while a file opened from it stays readable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlcd.errors import NotFoundError
from rlcd.storage import LocalStore
from rlcd.storage.sparse import ShortObjectError, sparse_copy

pytestmark = pytest.mark.anyio

DATA = bytes(range(256)) * 80_000  # 20 MB: a range of it takes more than one GET


async def test_parts_land_at_their_offsets(tmp_path: Path) -> None:
    (tmp_path / "obj").write_bytes(DATA)
    store = LocalStore(str(tmp_path))
    size = len(DATA)
    ranges = [(10, 20), (1_000_000, 19_000_000)]
    async with sparse_copy(store, "obj", size, prefix="rlcd-test-") as copy:
        copy.write(b"tail", size - 4)
        await copy.fetch(ranges)
        got = Path(copy.path).read_bytes()
    expected = bytearray(size)
    for start, stop in ranges:
        expected[start:stop] = DATA[start:stop]
    expected[-4:] = b"tail"
    assert got == bytes(expected)
    assert not os.path.exists(copy.path)


async def test_an_open_file_outlives_the_copy(tmp_path: Path) -> None:
    (tmp_path / "obj").write_bytes(DATA)
    store = LocalStore(str(tmp_path))
    async with sparse_copy(store, "obj", len(DATA), prefix="rlcd-test-") as copy:
        await copy.fetch([(0, 100)])
        fd = os.open(copy.path, os.O_RDONLY)
    try:
        assert not os.path.exists(copy.path)
        assert os.pread(fd, 100, 0) == DATA[:100]
    finally:
        os.close(fd)


async def test_a_short_or_missing_object_is_refused(tmp_path: Path) -> None:
    (tmp_path / "obj").write_bytes(DATA[:500])
    store = LocalStore(str(tmp_path))
    with pytest.raises(ShortObjectError, match="holds 0 bytes at 500, 500 expected"):
        async with sparse_copy(store, "obj", 1000, prefix="rlcd-test-") as copy:
            await copy.fetch([(0, 500), (500, 1000)])
    assert not os.path.exists(copy.path)
    with pytest.raises(NotFoundError):
        async with sparse_copy(store, "gone", 1000, prefix="rlcd-test-") as copy:
            await copy.fetch([(0, 10)])
