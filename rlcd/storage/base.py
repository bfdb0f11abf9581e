"""The object-store contract every backend implements, and the values it returns. Pure: it
declares, the backends do the IO.

A store is rooted at one location (an S3 bucket and prefix, or a local directory); keys are
``/``-separated paths relative to that root, never starting with ``/``. Every backend refuses a
malformed key (empty, absolute, or with an empty, ``.`` or ``..`` segment) with
:class:`rlcd.errors.StorageError`, so no key escapes the root. The docstrings of
:class:`ObjectStore` are the contract; ``tests/contract`` runs one suite over every backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = (
    "ObjectMeta",
    "Written",
    "AlreadyExists",
    "PutResult",
    "Versioned",
    "Mismatch",
    "SwapResult",
    "ObjectWriter",
    "PartCopier",
    "FileWriter",
    "LocalFiles",
    "ObjectStore",
    "MIN_PART_SIZE",
    "MAX_PART_SIZE",
    "MAX_PARTS",
    "PendingUpload",
    "DELETE_BATCH",
)
__pure__ = True

MIN_PART_SIZE = 5 * 1024 * 1024
"""S3's smallest multipart part (all but the last)."""

MAX_PART_SIZE = 5 * 1024**3
"""S3's largest multipart part."""

MAX_PARTS = 10_000
"""The most parts one S3 multipart upload takes."""

DELETE_BATCH = 1000
"""The most keys one :meth:`ObjectStore.delete_many` call takes (S3 ``DeleteObjects``' limit)."""


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """What a listing or ``head`` knows about one object. ``etag`` names the version a
    ``head`` found, where the backend knows one (S3); like :class:`Written`'s, it takes no
    part in equality."""

    key: str
    size: int
    last_modified_ms: int
    etag: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Written:
    """A conditional write (``put_if_absent``, ``put_if_match``) stored the object.

    ``etag`` names the version stored, for a later ``put_if_match`` or ``delete_if_match``;
    both backends set it. It takes no part in equality: two results say the same when they
    say the same thing happened.
    """

    key: str
    etag: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class AlreadyExists:
    """``put_if_absent`` found the key taken; nothing was written."""

    key: str


PutResult = Written | AlreadyExists


@dataclass(frozen=True, slots=True)
class Versioned:
    """An object's bytes and the ETag of that version of it (``get_versioned``)."""

    key: str
    data: bytes
    etag: str


@dataclass(frozen=True, slots=True)
class Mismatch:
    """``put_if_match`` found another version stored, or none: nothing was written."""

    key: str


SwapResult = Written | Mismatch


@dataclass(frozen=True, slots=True)
class PendingUpload:
    """A write that was started and never completed nor aborted: an S3 multipart upload, or a
    local temp file. A process killed mid-write leaves these behind, invisible to ``list``.

    ``rlcd_named`` is True when the backend named the upload itself (the local temp files,
    ``.<name>.<hex>.rlcd-tmp``), so it is rlcd's whatever its target's name; an S3 upload is
    only known as rlcd's by its target's name.
    """

    key: str
    upload_id: str
    initiated_ms: int
    rlcd_named: bool = False


class ObjectWriter(Protocol):
    """A streaming upload. Use as an async context manager: leaving it normally completes the
    object; leaving it with an exception aborts it, so no partial object or upload is left.

    A pyarrow writer running in a worker thread streams into it through
    ``anyio.from_thread.run(writer.write, data)``.
    """

    key: str

    async def write(self, data: bytes) -> None:
        """Append bytes; buffers at most one part before sending it."""
        ...

    async def complete(self) -> ObjectMeta:
        """Finish the upload; the object becomes visible atomically."""
        ...

    async def abort(self) -> None:
        """Drop everything written; idempotent, never raises for a missing upload."""
        ...

    def part_copier(self) -> PartCopier | None:
        """The writer's :class:`PartCopier`, or None when its store cannot copy ranges itself
        (then ranges are fetched and written). Callers ask instead of testing the class, so a
        wrapping writer (metering) keeps the capability of the writer it wraps."""
        ...

    async def __aenter__(self) -> ObjectWriter: ...

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None: ...


class PartCopier(Protocol):
    """The capability of a writer whose store copies a byte range of one of its own objects
    into the upload itself (S3: ``UploadPartCopy`` with ``x-amz-copy-source-range``), so the
    bytes never pass through rlcd.

    The store's part rules hold whatever the caller does: a range becomes whole parts of its
    own, so it is copied only when it is at least :data:`MIN_PART_SIZE` long and the part
    before it is too. :meth:`lead` says how many of the range's first bytes the caller must
    fetch and ``write`` first to fill that part; :meth:`copy` then takes the rest.
    """

    def lead(self, length: int) -> int | None:
        """The bytes a range of ``length`` must start with that the caller writes itself
        before :meth:`copy` takes the rest, or None when the range is too short to copy (the
        caller fetches and writes all of it)."""
        ...

    async def copy(self, source: str, start: int, stop: int) -> None:
        """Append the bytes ``[start, stop)`` of the object ``source`` (a key of the same
        store), copied by the store, in parts of at most :data:`MAX_PART_SIZE`. Call it right
        after writing :meth:`lead` bytes.

        Raises:
            CopyRefusedError: the store refused the copy; nothing was appended and the writer
                stays open, so the caller may fetch and write the range instead.
            ValueError: the range is shorter than :meth:`lead` allows.
        """
        ...


class FileWriter(ObjectWriter, Protocol):
    """An :class:`ObjectWriter` over a local temp file at ``path`` (set once entered), which a
    native writer (pyarrow's) may write itself instead of handing bytes to ``write``."""

    @property
    def path(self) -> str: ...


class LocalFiles(Protocol):
    """The capability of a store whose objects are local files (see
    :meth:`ObjectStore.local_files`): native readers and writers then use the files in place,
    with no bytes through Python, and the table's other writers commit by renames that never
    replace (put-if-absent too)."""

    def local_path(self, key: str) -> str:
        """The file holding ``key`` (it may not exist)."""
        ...

    async def get_many(self, keys: Sequence[str]) -> list[bytes]:
        """The whole objects of ``keys``, in order, read one after the other in one worker
        thread: a few small files (a log's commits) cost one thread hop, not one each. Each
        read is :meth:`ObjectStore.get`'s, errors included (:class:`rlcd.errors.NotFoundError`
        names the first missing key)."""
        ...

    def open_file_writer(self, key: str) -> FileWriter:
        """A writer for a new object whose temp file a native writer writes directly."""
        ...


class ObjectStore(Protocol):
    """Async access to one root of objects.

    Every method may raise :class:`rlcd.errors.StorageError`; transient failures are retried
    inside the backend and surface as :class:`rlcd.errors.RetriesExhaustedError` when they
    persist.
    """

    @property
    def root(self) -> str:
        """The URI this store is rooted at (``s3://bucket/prefix`` or ``file:///dir``)."""
        ...

    async def get(
        self, key: str, *, start: int | None = None, end: int | None = None
    ) -> bytes | bytearray:
        """The object's bytes, or the half-open range ``[start, end)`` of them, clipped to the
        object like a slice (a range past the end is empty).

        Raises :class:`rlcd.errors.NotFoundError` when the key does not exist.
        """
        ...

    async def head(self, key: str) -> ObjectMeta:
        """Size and modification time; :class:`rlcd.errors.NotFoundError` when missing."""
        ...

    def list(self, prefix: str, *, start_after: str | None = None) -> AsyncIterator[ObjectMeta]:
        """Every object whose key starts with ``prefix`` and sorts strictly after
        ``start_after``, in ascending byte order of key, recursively."""
        ...

    async def put(self, key: str, data: bytes) -> ObjectMeta:
        """Create or replace the object atomically."""
        ...

    async def put_if_absent(self, key: str, data: bytes) -> PutResult:
        """Create the object only if the key is free: exactly one of racing callers wins.

        A key that already holds exactly ``data`` also gives :class:`Written`: on S3 a write can
        land while its answer is lost, and the retry (ours, or the HTTP client's own) then meets
        it. The call is therefore idempotent, and payloads that must tell writers apart carry a
        unique id (Delta commits do, in ``commitInfo``).
        """
        ...

    async def get_versioned(self, key: str) -> Versioned:
        """The object's bytes with its ETag, an opaque name of this version that
        :meth:`put_if_match` and :meth:`delete_if_match` compare (S3's ETag; a content hash
        on local disk). For small objects that several writers update in turn (the lease).

        Raises :class:`rlcd.errors.NotFoundError` when the key does not exist.
        """
        ...

    async def put_if_match(self, key: str, data: bytes, etag: str) -> SwapResult:
        """Replace the object only if its stored version is still ``etag``: a compare-and-swap,
        exactly one of racing callers holding that ETag wins; :class:`Mismatch` when another
        version (or none) is stored.

        Idempotent like :meth:`put_if_absent`: a key that already holds exactly ``data`` gives
        :class:`Written` (our own swap whose answer was lost), so payloads carry a unique id.
        """
        ...

    async def delete(self, key: str) -> None:
        """Remove the object; deleting a missing key succeeds."""
        ...

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Remove up to :data:`DELETE_BATCH` objects in one request where the backend can;
        missing keys succeed, as with :meth:`delete`. The call is idempotent, so it is retried
        as a whole; when some keys still fail, the error names the first of them, and the
        others may or may not be gone.
        """

    async def delete_if_match(self, key: str, etag: str) -> bool:
        """Remove the object only if its stored version is still ``etag``. True when that
        version is gone (deleted now, or already missing); False when another version is
        stored, which is left untouched."""
        ...

    def open_writer(self, key: str) -> ObjectWriter:
        """A streaming writer for a new object (see :class:`ObjectWriter`)."""
        ...

    def list_uploads(self, prefix: str) -> AsyncIterator[PendingUpload]:
        """Every unfinished write (see :class:`PendingUpload`) whose target key starts with
        ``prefix``, in ascending order of key. A writer still running is listed too: callers
        judge by ``initiated_ms``."""
        ...

    async def abort_upload(self, key: str, upload_id: str) -> None:
        """Drop an unfinished write that :meth:`list_uploads` returned; the object at ``key``
        (if any) is untouched, and aborting an upload already gone succeeds."""
        ...

    def local_files(self) -> LocalFiles | None:
        """The store's objects as local files, or None when they are remote. Callers ask the
        store instead of testing its class, so a wrapping store (metering, faults) keeps the
        capability of the store it wraps."""
        ...

    async def aclose(self) -> None:
        """Release connections; the store refuses use afterwards."""
        ...
