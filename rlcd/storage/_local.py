"""The local-filesystem backend: the :class:`~rlcd.storage.base.ObjectStore` contract on a
POSIX directory.

Atomicity comes from the filesystem (renames and links), and only the compare-and-swap of a
small object takes a lock:

- ``put`` and a writer's ``complete`` write a temp file beside the target, fsync it and
  ``os.replace`` it over the target;
- ``put_if_absent`` writes and fsyncs a temp file, then ``os.link``\\ s it to the target: link
  fails with ``FileExistsError`` instead of replacing, so exactly one racer wins (a loser whose
  bytes are identical to the winner's counts as written, as the contract says);
- ``put_if_match`` and ``delete_if_match`` compare and act under an exclusive ``flock`` of the
  target's directory, held across processes (a local POSIX filesystem; not NFS): the ETag is
  a hash of the content, and the swap itself is the same temp file and ``os.replace`` as
  ``put``. ``put_if_absent`` needs no lock: the compared file exists throughout a swap, so its
  link fails meanwhile;
- temp files live in the target's directory (same filesystem, so link and replace are atomic),
  are named ``.<name>.<32 hex digits>.rlcd-tmp``, and listings skip them. Keys whose last
  segment looks like that are refused. The name is rlcd's alone, so the temp files a killed
  process left are found by ``list_uploads`` (as pending uploads) and removed by
  ``abort_upload``, never another program's file.

Blocking calls run in worker threads through ``anyio.to_thread.run_sync``, under ``limiter``
when one is given.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import stat
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread

from rlcd.errors import NotFoundError, StorageError
from rlcd.storage._keys import check_batch, check_key, check_prefix, check_range
from rlcd.storage._multipart import MultipartWriter, Pieces
from rlcd.storage.base import (
    MIN_PART_SIZE,
    AlreadyExists,
    Mismatch,
    ObjectMeta,
    PendingUpload,
    PutResult,
    SwapResult,
    Versioned,
    Written,
)
from rlcd.storage.uri import TableUri

__all__ = ("LocalStore", "LocalFileWriter", "TEMP_SUFFIX", "is_temp_name", "temp_target")

TEMP_SUFFIX = ".rlcd-tmp"
_TEMP_NAME = re.compile(r"\.(?P<target>.+)\.[0-9a-f]{32}" + re.escape(TEMP_SUFFIX))

_T = TypeVar("_T")

_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def is_temp_name(name: str) -> bool:
    """Whether a file name is one of this backend's in-flight temp files."""
    return _TEMP_NAME.fullmatch(name) is not None


def temp_target(name: str) -> str | None:
    """The name of the file a temp file was written for, or None when ``name`` is none of this
    backend's temp files."""
    match = _TEMP_NAME.fullmatch(name)
    return match["target"] if match is not None else None


class LocalStore:
    """Objects as files under one directory; keys are paths relative to it.

    The directory need not exist: writes create directories as needed, and listing a missing
    directory yields nothing, as on S3. Empty directories left by deletes are kept (removing
    them would race with concurrent writers).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        limiter: anyio.CapacityLimiter | None = None,
        part_size: int = MIN_PART_SIZE,
    ) -> None:
        self._dir = os.path.abspath(root)
        self._limiter = limiter
        self._part_size = part_size
        self._closed = False

    @property
    def root(self) -> str:
        return str(TableUri("file", "", self._dir))

    async def get(
        self, key: str, *, start: int | None = None, end: int | None = None
    ) -> bytes | bytearray:
        path = self._path("get", key)
        first, last = check_range("get", key, start, end)
        return await self._run(lambda: _read(key, path, first, last))

    async def get_many(self, keys: Sequence[str]) -> list[bytes]:
        paths = [(key, self._path("get", key)) for key in keys]
        return await self._run(lambda: [_read(key, path, 0, None) for key, path in paths])

    async def head(self, key: str) -> ObjectMeta:
        path = self._path("head", key)
        return await self._run(lambda: _stat("head", key, path))

    def list(self, prefix: str, *, start_after: str | None = None) -> AsyncIterator[ObjectMeta]:
        self._check_open("list", prefix)
        check_prefix("list", prefix)
        return self._list(prefix, start_after)

    async def put(self, key: str, data: bytes) -> ObjectMeta:
        path = self._path("put", key)

        def replace() -> ObjectMeta:
            with _errors("put", key):
                _replace(path, data)
            return _stat("put", key, path)

        return await self._run(replace)

    async def get_versioned(self, key: str) -> Versioned:
        path = self._path("get_versioned", key)

        def read() -> Versioned:
            with _errors("get_versioned", key, reading=True), open(path, "rb") as f:
                data = f.read()
            return Versioned(key, data, _etag(data))

        return await self._run(read)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> SwapResult:
        path = self._path("put_if_match", key)

        def swap() -> SwapResult:
            with _errors("put_if_match", key), _dir_locked(path):
                current = _read_or_none(path)
                if current is None or _etag(current) != etag:
                    return Written(key, _etag(data)) if current == data else Mismatch(key)
                _replace(path, data)
            return Written(key, _etag(data))

        return await self._run(swap)

    async def put_if_absent(self, key: str, data: bytes) -> PutResult:
        path = self._path("put_if_absent", key)

        def link() -> PutResult:
            with _errors("put_if_absent", key):
                tmp = _write_temp(path, data)
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return Written(key, _etag(data)) if _holds(path, data) else AlreadyExists(key)
                finally:
                    _unlink(tmp)
                _fsync_dir(path)
            return Written(key, _etag(data))

        return await self._run(link)

    async def delete(self, key: str) -> None:
        path = self._path("delete", key)

        def unlink() -> None:
            with _errors("delete", key), suppress(*_MISSING):
                os.unlink(path)

        await self._run(unlink)

    async def delete_many(self, keys: Sequence[str]) -> None:
        """One unlink per key, in one worker thread: a filesystem has no batch delete."""
        check_batch("delete_many", keys)
        paths = [(key, self._path("delete_many", key)) for key in keys]

        def unlink_all() -> None:
            for key, path in paths:
                with _errors("delete_many", key), suppress(*_MISSING):
                    os.unlink(path)

        await self._run(unlink_all)

    async def delete_if_match(self, key: str, etag: str) -> bool:
        path = self._path("delete_if_match", key)

        def unlink() -> bool:
            with _errors("delete_if_match", key), _dir_locked(path):
                current = _read_or_none(path)
                if current is not None and _etag(current) != etag:
                    return False
                with suppress(*_MISSING):
                    os.unlink(path)
                    _fsync_dir(path)
            return True

        return await self._run(unlink)

    def local_path(self, key: str) -> str:
        """The file holding ``key``, for readers that read local files natively (the
        compaction opens its sources in place instead of copying them through ``get``)."""
        return self._path("local_path", key)

    def open_writer(self, key: str) -> MultipartWriter:
        self._path("open_writer", key)
        return MultipartWriter(key, _LocalParts(self), part_size=self._part_size)

    def list_uploads(self, prefix: str) -> AsyncIterator[PendingUpload]:
        self._check_open("list_uploads", prefix)
        check_prefix("list_uploads", prefix)
        return self._list_uploads(prefix)

    async def abort_upload(self, key: str, upload_id: str) -> None:
        path = self._path("abort_upload", key)
        directory, name = os.path.split(upload_id)
        if directory != os.path.dirname(path) or temp_target(name) != os.path.basename(path):
            raise StorageError(
                f"{upload_id} is not a temp file of this key", operation="abort_upload", key=key
            )
        with _errors("abort_upload", key):
            await self._run(lambda: _unlink(upload_id))

    def open_file_writer(self, key: str) -> LocalFileWriter:
        """A writer whose temp file a native writer (pyarrow's) may write directly, instead of
        handing bytes to ``write``; published and aborted like ``open_writer``'s uploads."""
        return LocalFileWriter(self, key, self._path("open_writer", key))

    def local_files(self) -> LocalStore:
        """This store itself: its objects are files (:class:`~rlcd.storage.base.LocalFiles`)."""
        return self

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> LocalStore:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.aclose()

    def _check_open(self, operation: str, key: str) -> None:
        if self._closed:
            raise StorageError("store is closed", operation=operation, key=key)

    def _path(self, operation: str, key: str) -> str:
        """The file for ``key``, after checking the store is open and the key is valid."""
        self._check_open(operation, key)
        check_key(operation, key)
        if is_temp_name(key.rpartition("/")[2]):
            raise StorageError("key has the form of a temp file", operation=operation, key=key)
        return os.path.join(self._dir, *key.split("/"))

    async def _run(self, fn: Callable[[], _T]) -> _T:
        return await anyio.to_thread.run_sync(fn, limiter=self._limiter)

    async def _list(self, prefix: str, start_after: str | None) -> AsyncIterator[ObjectMeta]:
        listing = await self._run(lambda: _scan(self._dir, prefix, start_after))
        for meta in listing:
            yield meta

    async def _list_uploads(self, prefix: str) -> AsyncIterator[PendingUpload]:
        head = prefix.rpartition("/")[0]
        temps = await self._run(lambda: _scan(self._dir, head, None, temps=True))
        found: list[PendingUpload] = []
        for meta in temps:
            directory, _, name = meta.key.rpartition("/")
            key = f"{directory}/{temp_target(name)}" if directory else str(temp_target(name))
            if key.startswith(prefix):
                path = os.path.join(self._dir, *meta.key.split("/"))
                found.append(PendingUpload(key, path, meta.last_modified_ms, rlcd_named=True))
        found.sort(key=lambda upload: (upload.key, upload.upload_id))
        for upload in found:
            yield upload


class _LocalParts:
    """The :class:`~rlcd.storage._multipart.PartSink` of a local store: parts are appended to a
    temp file, published by ``os.replace``."""

    def __init__(self, store: LocalStore) -> None:
        self._store = store

    async def put_whole(self, key: str, data: Pieces) -> ObjectMeta:
        return await self._store.put(key, b"".join(data))  # less than one part

    async def start_upload(self, key: str) -> str:
        path = self._store._path("write", key)
        with _errors("write", key):
            return await self._store._run(lambda: _write_temp(path, b""))

    async def upload_part(self, key: str, upload_id: str, number: int, data: Pieces) -> str:
        self._store._check_open("write", key)

        def append() -> str:
            with _errors("write", key), open(upload_id, "ab") as f:
                f.writelines(data)
            return str(number)

        return await self._store._run(append)

    async def complete_upload(self, key: str, upload_id: str, _tags: Sequence[str]) -> ObjectMeta:
        path = self._store._path("complete", key)
        return await self._store._run(lambda: _publish(key, upload_id, path))

    async def abort_upload(self, key: str, upload_id: str) -> None:
        with _errors("abort", key):
            await self._store._run(lambda: _unlink(upload_id))


def _publish(key: str, temp: str, target: str) -> ObjectMeta:
    """Make a finished temp file durable and move it over ``target`` atomically."""
    with _errors("complete", key):
        with open(temp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temp, target)
        _fsync_dir(target)
    return _stat("complete", key, target)


class LocalFileWriter:
    """An :class:`~rlcd.storage.base.ObjectWriter` over one temp file beside the target.

    Entering creates the (empty, durable) temp file at ``path``; its bytes come from ``write``
    or from a native writer writing ``path`` itself, in a worker thread, before ``complete``.
    Completing fsyncs the file and ``os.replace``\\ s it over the target; leaving with an
    exception (or ``abort``) deletes it, so nothing partial is ever visible or left behind.
    """

    def __init__(self, store: LocalStore, key: str, target: str) -> None:
        self.key = key
        self._store = store
        self._target = target
        self.path = ""
        self._finished = False

    async def __aenter__(self) -> LocalFileWriter:
        with _errors("write", self.key):
            self.path = await self._store._run(lambda: _write_temp(self._target, b""))
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is not None:
            self._discard()
        elif not self._finished:
            await self.complete()

    async def write(self, data: bytes) -> None:
        self._check_open("write")

        def append() -> None:
            with _errors("write", self.key), open(self.path, "ab") as f:
                f.write(data)

        try:
            await self._store._run(append)
        except BaseException:
            self._discard()
            raise

    async def complete(self) -> ObjectMeta:
        self._check_open("complete")
        self._finished = True
        path, target, key = self.path, self._target, self.key
        try:
            return await self._store._run(lambda: _publish(key, path, target))
        except BaseException:
            _unlink(path)
            raise

    async def abort(self) -> None:
        self._discard()

    def part_copier(self) -> None:
        """None: a native writer or ``write`` fills the file; ranges are copied by the
        caller (``os.copy_file_range``)."""

    def _discard(self) -> None:
        """Delete the temp file: at once, without awaiting, so a cancelled writer cleans up."""
        self._finished = True
        if self.path:
            _unlink(self.path)

    def _check_open(self, operation: str) -> None:
        if self._finished or not self.path:
            raise StorageError(
                "writer not open, or already completed or aborted",
                operation=operation,
                key=self.key,
            )


@contextmanager
def _errors(operation: str, key: str, *, reading: bool = False) -> Iterator[None]:
    """Turn ``OSError`` into :class:`StorageError`; when ``reading``, a missing path into
    :class:`NotFoundError`."""
    try:
        yield
    except OSError as exc:
        if reading and isinstance(exc, _MISSING):
            raise NotFoundError(operation=operation, key=key) from exc
        raise StorageError(exc.strerror or str(exc), operation=operation, key=key) from exc


def _read(key: str, path: str, first: int, last: int | None) -> bytes:
    """``get``'s read of the bytes ``[first, last)`` of the file holding ``key``."""
    with _errors("get", key, reading=True), open(path, "rb") as f:
        f.seek(first)
        return f.read() if last is None else f.read(last - first)


def _stat(operation: str, key: str, path: str) -> ObjectMeta:
    with _errors(operation, key, reading=True):
        st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotFoundError(operation=operation, key=key)
    return ObjectMeta(key, st.st_size, st.st_mtime_ns // 1_000_000)


def _etag(data: bytes) -> str:
    """The local ETag of an object holding ``data``: a hash of the content, so equal ETags
    mean equal bytes (payloads compared by ETag carry a unique id)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except _MISSING:
        return None


def _replace(path: str, data: bytes) -> None:
    """Write ``data`` durably to a temp file and move it over ``path`` atomically."""
    tmp = _write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(path)


@contextmanager
def _dir_locked(path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` of ``path``'s directory (created if missing): one
    compare-and-swap at a time in that directory, across threads and processes."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _holds(path: str, data: bytes) -> bool:
    """Whether the file holds exactly ``data``."""
    try:
        if os.stat(path).st_size != len(data):
            return False
        with open(path, "rb") as f:
            return f.read() == data
    except _MISSING:
        return False


def _write_temp(path: str, data: bytes) -> str:
    """Write ``data`` durably to a fresh temp file beside ``path``; returns the temp path."""
    directory, name = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _unlink(path: str) -> None:
    Path(path).unlink(missing_ok=True)


def _fsync_dir(path: str) -> None:
    """Make a rename or link in ``path``'s directory durable."""
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _scan(
    root: str, prefix: str, start_after: str | None, *, temps: bool = False
) -> list[ObjectMeta]:
    """Every file under ``root`` whose key matches, sorted by key: the objects, or with
    ``temps`` only the temp files (their own keys, not their targets').

    Only directories that can hold a match are entered, so listing ``_delta_log/`` never walks
    the data files. Sorting ``str`` keys by code point is sorting their UTF-8 bytes.
    """
    head = prefix.rpartition("/")[0]
    pending = [(os.path.join(root, *head.split("/")), f"{head}/" if head else "")]
    found: list[ObjectMeta] = []
    while pending:
        directory, rel = pending.pop()
        try:
            entries = os.scandir(directory)
        except _MISSING:
            continue
        with entries:
            for entry in entries:
                key = rel + entry.name
                if entry.is_dir(follow_symlinks=False):
                    sub = f"{key}/"
                    if sub.startswith(prefix) or prefix.startswith(sub):
                        pending.append((entry.path, sub))
                elif (
                    key.startswith(prefix)
                    and (start_after is None or key > start_after)
                    and is_temp_name(entry.name) is temps
                ):
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue  # deleted while we listed
                    if stat.S_ISREG(st.st_mode):
                        found.append(ObjectMeta(key, st.st_size, st.st_mtime_ns // 1_000_000))
    found.sort(key=lambda meta: meta.key)
    return found
