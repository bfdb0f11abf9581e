"""Parts of an object copied into a sparse local file, each at its offset: a native reader
(pyarrow) then opens the file by path as if it were the whole object and reads only the parts
it needs, never the holes, which take no disk. Memory holds one GET at a time.

The file is a temp file in the default temp dir (the CLI points ``TMPDIR`` at its per-process
scratch dir), deleted when :func:`sparse_copy` exits: a file opened by then stays readable
until it is closed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Final

from rlcd.storage.base import ObjectStore

__all__ = ("ShortObjectError", "SparseCopy", "sparse_copy")

_GET_BYTES: Final = 8 * 1024 * 1024
"""The most bytes one GET fetches: what a copy holds in memory at a time."""


class ShortObjectError(ValueError):
    """The object ends before a range it was to hold: the caller's file is truncated."""


class SparseCopy:
    """A temp file of an object's size holding the parts written or fetched into it."""

    def __init__(self, store: ObjectStore, key: str, fd: int, path: str) -> None:
        self._store, self._key, self._fd = store, key, fd
        self.path = path
        """Where to open the file, until :func:`sparse_copy` exits."""

    def write(self, data: bytes | bytearray, offset: int) -> None:
        """Write bytes already read (a footer) at ``offset``."""
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            view, offset = view[written:], offset + written

    async def fetch(self, ranges: Iterable[tuple[int, int]]) -> None:
        """GET the object's byte ranges ``[start, stop)`` and write each at its offset.

        Raises:
            NotFoundError: the object is missing.
            ShortObjectError: the object ends before a range does.
        """
        for start, stop in ranges:
            for at in range(start, stop, _GET_BYTES):
                end = min(stop, at + _GET_BYTES)
                data = await self._store.get(self._key, start=at, end=end)
                if len(data) != end - at:
                    raise ShortObjectError(f"holds {len(data)} bytes at {at}, {end - at} expected")
                self.write(data, at)


@asynccontextmanager
async def sparse_copy(
    store: ObjectStore, key: str, size: int, *, prefix: str
) -> AsyncIterator[SparseCopy]:
    """A copy of ``key`` (``size`` bytes) holding nothing yet, deleted on exit.

    Args:
        prefix: the temp file's name prefix, saying what it is to one who lists the temp dir.
    """
    fd, path = tempfile.mkstemp(prefix=prefix)
    try:
        os.ftruncate(fd, size)
        yield SparseCopy(store, key, fd, path)
    finally:
        os.close(fd)
        os.unlink(path)
