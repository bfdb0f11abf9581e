"""A store that counts the requests and bytes of the store it wraps, per operation.

Every call is delegated unchanged, capabilities included (:meth:`MeteredStore.local_files`
meters the wrapped store's local files), so code under test runs exactly as on the real store.
Tests read :attr:`MeteredStore.requests` to assert IO costs (an idle poll is one ``list``);
the daemon passes ``on_request`` to feed its request counters. One call is one request: a
listing counts once however many pages the backend fetches, a streaming upload once when
opened.

Operations: ``get``, ``head``, ``list``, ``put``, ``put_if_absent``, ``get_versioned``,
``put_if_match``, ``delete``, ``delete_if_match``, ``upload``
(a streaming writer), ``copy`` (a range a writer's store copied itself: its bytes never pass
through rlcd), ``list_uploads``, ``abort_upload``, and for local files ``local_read``
(a file opened in place) and ``local_write`` (a file written natively); their ``get_many``
counts as a ``get`` of each key. Bytes are those read or written by the call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Self

from rlcd.storage.base import (
    FileWriter,
    LocalFiles,
    ObjectMeta,
    ObjectStore,
    ObjectWriter,
    PartCopier,
    PendingUpload,
    PutResult,
    SwapResult,
    Versioned,
)

__all__ = ("MeteredStore", "RequestHook")

RequestHook = Callable[[str, int, int], None]
"""Called with ``(operation, requests, bytes)`` whenever either count grows: once per request
(``requests`` 1; n for a ``get_many`` of n keys), and again for bytes a streaming writer sends
later (``requests`` 0)."""


class MeteredStore:
    """An :class:`~rlcd.storage.base.ObjectStore` counting what it delegates to ``inner``.

    Closing it closes ``inner``.
    """

    def __init__(self, inner: ObjectStore, *, on_request: RequestHook | None = None) -> None:
        self.inner = inner
        self.requests: Counter[str] = Counter()
        """Requests made, per operation."""
        self.bytes: Counter[str] = Counter()
        """Bytes read or written, per operation."""
        self._hook = on_request

    def reset(self) -> None:
        """Forget what was counted so far."""
        self.requests.clear()
        self.bytes.clear()

    def count(self, operation: str, nbytes: int = 0, *, requests: int = 1) -> None:
        """Record ``requests`` requests moving ``nbytes`` (the writers here call it too)."""
        self.requests[operation] += requests
        self.bytes[operation] += nbytes
        if self._hook is not None:
            self._hook(operation, requests, nbytes)

    @property
    def root(self) -> str:
        return self.inner.root

    async def get(
        self, key: str, *, start: int | None = None, end: int | None = None
    ) -> bytes | bytearray:
        try:
            data = await self.inner.get(key, start=start, end=end)
        except BaseException:
            self.count("get")
            raise
        self.count("get", len(data))
        return data

    async def head(self, key: str) -> ObjectMeta:
        self.count("head")
        return await self.inner.head(key)

    def list(self, prefix: str, *, start_after: str | None = None) -> AsyncIterator[ObjectMeta]:
        self.count("list")
        return self.inner.list(prefix, start_after=start_after)

    async def put(self, key: str, data: bytes) -> ObjectMeta:
        self.count("put", len(data))
        return await self.inner.put(key, data)

    async def put_if_absent(self, key: str, data: bytes) -> PutResult:
        self.count("put_if_absent", len(data))
        return await self.inner.put_if_absent(key, data)

    async def get_versioned(self, key: str) -> Versioned:
        try:
            found = await self.inner.get_versioned(key)
        except BaseException:
            self.count("get_versioned")
            raise
        self.count("get_versioned", len(found.data))
        return found

    async def put_if_match(self, key: str, data: bytes, etag: str) -> SwapResult:
        self.count("put_if_match", len(data))
        return await self.inner.put_if_match(key, data, etag)

    async def delete(self, key: str) -> None:
        self.count("delete")
        await self.inner.delete(key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        self.count("delete_many")
        await self.inner.delete_many(keys)

    async def delete_if_match(self, key: str, etag: str) -> bool:
        self.count("delete_if_match")
        return await self.inner.delete_if_match(key, etag)

    def open_writer(self, key: str) -> ObjectWriter:
        self.count("upload")
        return _MeteredWriter(self, self.inner.open_writer(key))

    def list_uploads(self, prefix: str) -> AsyncIterator[PendingUpload]:
        self.count("list_uploads")
        return self.inner.list_uploads(prefix)

    async def abort_upload(self, key: str, upload_id: str) -> None:
        self.count("abort_upload")
        await self.inner.abort_upload(key, upload_id)

    def local_files(self) -> LocalFiles | None:
        files = self.inner.local_files()
        return None if files is None else _MeteredFiles(self, files)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.aclose()


class _MeteredWriter:
    """A streaming writer whose bytes count towards ``upload``."""

    def __init__(self, meter: MeteredStore, inner: ObjectWriter) -> None:
        self._meter = meter
        self._inner = inner
        self.key = inner.key

    async def write(self, data: bytes) -> None:
        self._meter.count("upload", len(data), requests=0)
        await self._inner.write(data)

    async def complete(self) -> ObjectMeta:
        return await self._inner.complete()

    async def abort(self) -> None:
        await self._inner.abort()

    def part_copier(self) -> PartCopier | None:
        copier = self._inner.part_copier()
        return None if copier is None else _MeteredCopier(self._meter, copier)

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self._inner.__aexit__(exc_type, exc, tb)


class _MeteredCopier:
    """The wrapped writer's :class:`~rlcd.storage.base.PartCopier`: each copied range counts
    once towards ``copy``, with its bytes (whether the store sent it as one part or more)."""

    def __init__(self, meter: MeteredStore, inner: PartCopier) -> None:
        self._meter = meter
        self._inner = inner

    def lead(self, length: int) -> int | None:
        return self._inner.lead(length)

    async def copy(self, source: str, start: int, stop: int) -> None:
        try:
            await self._inner.copy(source, start, stop)
        except BaseException:
            self._meter.count("copy")
            raise
        self._meter.count("copy", stop - start)


class _MeteredFileWriter(_MeteredWriter):
    """A native file writer: its bytes count towards ``local_write`` once it completes."""

    def __init__(self, meter: MeteredStore, inner: FileWriter) -> None:
        super().__init__(meter, inner)
        self._file = inner

    @property
    def path(self) -> str:
        return self._file.path

    async def write(self, data: bytes) -> None:
        await self._file.write(data)

    async def complete(self) -> ObjectMeta:
        meta = await self._file.complete()
        self._meter.count("local_write", meta.size, requests=0)
        return meta


class _MeteredFiles:
    """The wrapped store's :class:`~rlcd.storage.base.LocalFiles`, counted."""

    def __init__(self, meter: MeteredStore, inner: LocalFiles) -> None:
        self._meter = meter
        self._inner = inner

    def local_path(self, key: str) -> str:
        self._meter.count("local_read")
        return self._inner.local_path(key)

    async def get_many(self, keys: Sequence[str]) -> list[bytes]:
        """Counted as the ``get`` of each key (a remote store would send one each)."""
        try:
            found = await self._inner.get_many(keys)
        except BaseException:
            self._meter.count("get", requests=len(keys))
            raise
        self._meter.count("get", sum(len(data) for data in found), requests=len(keys))
        return found

    def open_file_writer(self, key: str) -> FileWriter:
        self._meter.count("local_write")
        return _MeteredFileWriter(self._meter, self._inner.open_file_writer(key))
