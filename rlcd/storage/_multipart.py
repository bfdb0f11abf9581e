"""The streaming writers the backends hand out, over a backend's :class:`PartSink`.

Rules it keeps, whatever the backend:

- memory is bounded: at most one part is buffered; a part goes out as soon as it is full, and
  ``write`` waits for it (backpressure instead of a queue);
- bytes are never copied: a part is handed to the sink as the pieces that were written (a sink
  sends or writes them one after the other), so a part is in memory once, not joined again;
- every part but the last is at least 5 MiB, at most 5 GiB, and at most 10,000 parts are sent
  (S3's rules); a part of written bytes is exactly ``part_size`` bytes, unless a copied range
  follows it;
- an object smaller than one part is sent whole at ``complete``, never as a multipart upload;
- :class:`CopyingWriter` (over a :class:`PartCopySink`) also takes ranges of the store's own
  objects, copied by the store as parts of their own (:class:`~rlcd.storage.base.PartCopier`);
- any failure aborts the upload before the error propagates, under a shielded deadline so that
  even a cancelled writer leaves no incomplete upload behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import anyio
import structlog

from rlcd.errors import CopyRefusedError, StorageError
from rlcd.storage.base import MAX_PART_SIZE, MAX_PARTS, MIN_PART_SIZE, ObjectMeta

__all__ = (
    "PartSink",
    "PartCopySink",
    "MultipartWriter",
    "CopyingWriter",
    "Pieces",
    "ABORT_TIMEOUT_S",
)

Pieces = tuple[bytes | memoryview, ...]
"""The bytes of one part or object, in order, as they were written (views of immutable
``bytes``): the sink reads them and keeps none."""

ABORT_TIMEOUT_S = 60.0
"""How long a cleanup abort may take once the writer failed or was cancelled."""

_log = structlog.get_logger(__name__)


class PartSink(Protocol):
    """The backend calls a writer makes. Each call retries on its own."""

    async def put_whole(self, key: str, data: Pieces) -> ObjectMeta:
        """Store a small object in one request."""
        ...

    async def start_upload(self, key: str) -> str:
        """Begin a multipart upload; returns its id."""
        ...

    async def upload_part(self, key: str, upload_id: str, number: int, data: Pieces) -> str:
        """Store part ``number`` (1-based, sent in order); returns its tag (S3: the ETag)."""
        ...

    async def complete_upload(self, key: str, upload_id: str, tags: Sequence[str]) -> ObjectMeta:
        """Publish the parts, in order, as one object, atomically."""
        ...

    async def abort_upload(self, key: str, upload_id: str) -> None:
        """Drop the upload; succeeds when it is already gone."""
        ...


class PartCopySink(PartSink, Protocol):
    """A sink whose store can also build a part from a range of one of its own objects."""

    async def copy_part(
        self, key: str, upload_id: str, number: int, source: str, start: int, stop: int
    ) -> str:
        """Store part ``number`` as the bytes ``[start, stop)`` of the object ``source``,
        copied by the store; returns its tag. Raises
        :class:`~rlcd.errors.CopyRefusedError` when the store refuses (nothing stored)."""
        ...


class MultipartWriter:
    """An :class:`~rlcd.storage.base.ObjectWriter` that sends exact-size parts to a sink.

    Not for concurrent use: one task (or one worker thread through ``anyio.from_thread``)
    writes, then completes or aborts.
    """

    def __init__(self, key: str, sink: PartSink, *, part_size: int = MIN_PART_SIZE) -> None:
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size {part_size} is below the minimum {MIN_PART_SIZE}")
        self.key = key
        self._sink = sink
        self._part_size = part_size
        # the part being filled, as pieces of immutable bytes (or views of them), handed to the
        # sink as they are: never copied into one buffer
        self._pieces: list[bytes | memoryview] = []
        self._buffered = 0
        self._upload_id: str | None = None
        self._tags: list[str] = []
        self._finished = False

    async def write(self, data: bytes) -> None:
        """Append bytes, sending each part as it fills. ``data`` may be any bytes-like object;
        the writer keeps ``bytes`` as they are and copies anything else (which could change)."""
        self._check_open("write")
        piece: bytes | memoryview = data if type(data) is bytes else bytes(data)
        try:
            while self._buffered + len(piece) >= self._part_size:
                take = self._part_size - self._buffered
                if take < len(piece):
                    view = memoryview(piece)
                    self._pieces.append(view[:take])
                    piece = view[take:]
                else:
                    self._pieces.append(piece)
                    piece = b""
                self._buffered += take
                await self._send_buffer()
            if piece:
                self._pieces.append(piece)
                self._buffered += len(piece)
        except BaseException:
            await self._abort_quietly()
            raise

    async def complete(self) -> ObjectMeta:
        """Send what is left and publish the object."""
        self._check_open("complete")
        self._finished = True
        try:
            if self._upload_id is None:
                meta = await self._sink.put_whole(self.key, self._take_buffer())
            else:
                if self._buffered:
                    await self._send_buffer()
                meta = await self._sink.complete_upload(self.key, self._upload_id, self._tags)
                self._upload_id = None
        except BaseException:
            await self._abort_quietly()
            raise
        return meta

    async def abort(self) -> None:
        """Drop everything written; a no-op once completed or aborted."""
        self._finished = True
        self._pieces, self._buffered = [], 0
        if self._upload_id is not None:
            await self._sink.abort_upload(self.key, self._upload_id)
            self._upload_id = None

    def part_copier(self) -> CopyingWriter | None:
        """None: this writer's sink only takes bytes."""
        return None

    async def __aenter__(self) -> MultipartWriter:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Complete on a normal exit (unless already finished); abort on an exception."""
        if exc is not None:
            await self._abort_quietly()
        elif not self._finished:
            await self.complete()

    def _check_open(self, operation: str) -> None:
        if self._finished:
            raise StorageError(
                "writer already completed or aborted", operation=operation, key=self.key
            )

    async def _send_buffer(self) -> None:
        upload_id, number = await self._next_part()
        tag = await self._sink.upload_part(self.key, upload_id, number, self._take_buffer())
        self._tags.append(tag)

    async def _next_part(self) -> tuple[str, int]:
        """The upload (begun if need be) and the number of its next part."""
        if self._upload_id is None:
            self._upload_id = await self._sink.start_upload(self.key)
        number = len(self._tags) + 1
        if number > MAX_PARTS:
            raise StorageError(f"more than {MAX_PARTS} parts", operation="write", key=self.key)
        return self._upload_id, number

    def _take_buffer(self) -> Pieces:
        """The buffered pieces; empties the buffer."""
        pieces = tuple(self._pieces)
        self._pieces, self._buffered = [], 0
        return pieces

    async def _abort_quietly(self) -> None:
        """Abort during error handling: shielded and bounded, and logging (not raising) its own
        failure so the original error is the one that propagates."""
        with anyio.move_on_after(ABORT_TIMEOUT_S, shield=True) as scope:
            try:
                await self.abort()
            except StorageError as exc:
                _log.warning("multipart_abort_failed", key=self.key, error=str(exc))
        if scope.cancelled_caught:
            _log.warning("multipart_abort_failed", key=self.key, error="timed out")


class CopyingWriter(MultipartWriter):
    """A :class:`MultipartWriter` that is also a :class:`~rlcd.storage.base.PartCopier`: a
    range of the store's own objects becomes parts the store copies itself.

    A copy ends the part being filled: that part is sent first, so it must hold at least
    :data:`~rlcd.storage.base.MIN_PART_SIZE` bytes; :meth:`lead` asks the caller to fill it
    from the range's first bytes. The part after a copy starts empty.
    """

    def __init__(self, key: str, sink: PartCopySink, *, part_size: int = MIN_PART_SIZE) -> None:
        super().__init__(key, sink, part_size=part_size)
        self._copy_sink = sink

    def part_copier(self) -> CopyingWriter:
        return self

    def lead(self, length: int) -> int | None:
        lead = max(0, MIN_PART_SIZE - self._buffered) if self._buffered else 0
        return lead if length - lead >= MIN_PART_SIZE else None

    async def copy(self, source: str, start: int, stop: int) -> None:
        self._check_open("copy")
        if 0 < self._buffered < MIN_PART_SIZE or stop - start < MIN_PART_SIZE:
            raise ValueError(
                f"{self.key}: a copy of {stop - start} bytes after a part of {self._buffered}"
            )
        position = start
        try:
            if self._buffered:
                await self._send_buffer()
            for end in _part_ends(start, stop):
                upload_id, number = await self._next_part()
                tag = await self._copy_sink.copy_part(
                    self.key, upload_id, number, source, position, end
                )
                self._tags.append(tag)
                position = end
        except CopyRefusedError as exc:
            if position == start:
                raise  # nothing of the range appended: the caller fetches it instead
            await self._abort_quietly()
            raise StorageError(
                f"the store refused part of {source}[{start}:{stop}] after copying {position}",
                operation="copy",
                key=self.key,
            ) from exc
        except BaseException:
            await self._abort_quietly()
            raise


def _part_ends(start: int, stop: int) -> list[int]:
    """Where the parts of a copied range ``[start, stop)`` end: as few as
    :data:`~rlcd.storage.base.MAX_PART_SIZE` allows, of near-equal sizes (so none is short)."""
    count = -(-(stop - start) // MAX_PART_SIZE)
    return [start + (stop - start) * n // count for n in range(1, count + 1)]
