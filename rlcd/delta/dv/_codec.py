"""Deletion-vector bytes <-> bitmaps (protocol notes §3.4-§3.6). Pure: bytes in, bitmaps out.

Theory of operation
-------------------
A DV *file* is one version byte (``0x01``) followed by DVs packed back to back, each framed as
``u32 BE dataSize | blob | u32 BE CRC-32(blob)``; a descriptor's ``offset`` points at the length
field, so the first DV of a file sits at offset 1 (§3.4, §0 item 4). The *blob* is the
RoaringBitmapArray: ``u32 LE magic 1681511377`` + the 64-bit portable Roaring body ``u64 LE
bucket count``, then per bucket ``u32 LE key`` (high 32 bits, < 2**31) + a standard 32-bit
portable RoaringBitmap (§3.5). An inline DV (``i``) is the blob alone, Z85-encoded (§3.6).

Reading is lenient where the format is: pyroaring decodes sparse and Spark's dense bucket lists,
and any container choice. It is strict about everything that signals damage: version byte,
stored length, CRC, magic, bucket keys, trailing bytes, cardinality. Every failure is a
:class:`DVFormatError`; :func:`load_dv` turns it into a :class:`~rlcd.errors.DeletionVectorError`
naming the table, version, data file and DV.

Writing reproduces Spark byte for byte (verified against every fixture DV), because a DV rlcd
writes should be indistinguishable from one written by Spark (``RoaringBitmapArray.scala``,
``BitmapAggregator.scala``):

* Spark's array-backed bitmap writes one bucket per key ``0..max key``, empty buckets included;
  pyroaring writes only non-empty buckets, so the 64-bit wrapper is written here.
* Spark calls ``runOptimize()`` on freshly built bitmaps (``BitmapAggregator.eval``). Java
  RoaringBitmap builds array containers (cardinality <= 4096) or bitset containers, and turns one
  into a run container only when the run form is *strictly* smaller (array: ``2 + 4*runs <
  2*card``; bitset: ``2 + 4*runs < 8192``). CRoaring's ``run_optimize`` makes the same choice for
  array and bitset containers, but keeps an existing run container on a tie (e.g. ``{0, 1, 2}``
  built with ``add_range``), so run containers are re-checked against Java's rule here. The
  result depends only on the set, never on how the bitmap was built.

Limit of "byte-identical to Spark": when a DML statement adds deletions to a file that already
has a DV, Spark ORs the two bitmaps and writes the result *without* ``runOptimize``
(``DeletionVectorWriter.storeBitmapAndGenerateResult``), so those containers depend on history
(an array container {0, 1} OR {2, 3} stays an array where a fresh build has a run). Such a DV
re-encodes to a different but equivalent blob. Every fixture DV re-encodes identically.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pyroaring import AbstractBitMap64, BitMap64

from rlcd.delta.dv._z85 import z85_decode
from rlcd.errors import DeletionVectorError, InternalError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rlcd.delta.dv.descriptor import DeletionVectorDescriptor

__all__ = (
    "PORTABLE_MAGIC",
    "NATIVE_MAGIC",
    "FORMAT_VERSION",
    "MAX_ROW_INDEX",
    "DVFormatError",
    "serialize_bitmap",
    "deserialize_bitmap",
    "encode_dv_range",
    "encode_dv_file",
    "decode_dv_range",
    "decode_dv_file",
    "decode_inline_dv",
    "dv_byte_range",
    "load_dv",
)
__pure__ = True

PORTABLE_MAGIC: Final = 1681511377
"""RoaringBitmapArray "portable" format: the only one in the spec (§3.5)."""
NATIVE_MAGIC: Final = 1681511376
"""Spark's legacy "native" format; readable by Spark only, rejected here as by kernel-rs."""
FORMAT_VERSION: Final = 1
"""Byte 0 of every DV file (§3.4)."""
MAX_ROW_INDEX: Final = (1 << 48) - 1
"""Largest position :func:`serialize_bitmap` writes: 65536 dense buckets (see there)."""

_MAX_KEY: Final = (1 << 31) - 1  # Delta: the most significant bit of a row index is 0 (§3.5)
_COOKIE_NO_RUN: Final = 12346
_COOKIE_RUN: Final = 12347
_NO_OFFSET_THRESHOLD: Final = 4  # run-cookie bitmaps omit container offsets below 4 containers
_ARRAY_MAX: Final = 4096  # Java ArrayContainer.DEFAULT_MAX_SIZE; also CRoaring's
_BITSET_BYTES: Final = 8192
_EMPTY_32: Final = struct.pack("<II", _COOKIE_NO_RUN, 0)  # an empty 32-bit portable bitmap
_FRAME_OVERHEAD: Final = 8  # u32 length + u32 CRC around each blob


class DVFormatError(ValueError):
    """Bytes that are not a valid deletion vector; :func:`load_dv` adds table/file context."""


# --- 32-bit and 64-bit portable Roaring layout --------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Container:
    key: int  # high 16 bits within the bucket
    cardinality: int
    kind: str  # "array" | "bitset" | "run"
    data: memoryview  # container payload as serialized ("run": starts with the u16 run count)


@dataclass(frozen=True, slots=True)
class _Bucket:
    key: int  # high 32 bits of the row index
    raw: memoryview  # the whole 32-bit portable bitmap
    containers: list[_Container]


def _take(buf: memoryview, pos: int, size: int, what: str) -> memoryview:
    if pos + size > len(buf):
        raise DVFormatError(
            f"bitmap truncated: {what} needs bytes {pos}..{pos + size}, have {len(buf)}"
        )
    return buf[pos : pos + size]


def _walk_32(buf: memoryview, start: int) -> tuple[int, list[_Container]]:
    """Parse one 32-bit portable RoaringBitmap at ``start``; return its end and containers.

    Layout per RoaringFormatSpec (see §3.5): cookie, [run flags], (key, card-1) pairs, [offsets],
    container payloads in order.
    """
    (cookie,) = struct.unpack("<I", _take(buf, start, 4, "cookie"))
    pos = start + 4
    run_flags: memoryview | None = None
    if cookie & 0xFFFF == _COOKIE_RUN:
        count = (cookie >> 16) + 1
        run_flags = _take(buf, pos, (count + 7) // 8, "run flags")
        pos += len(run_flags)
    elif cookie == _COOKIE_NO_RUN:
        (count,) = struct.unpack("<I", _take(buf, pos, 4, "container count"))
        pos += 4
        if count > 1 << 16:
            raise DVFormatError(f"32-bit bitmap claims {count} containers (max 65536)")
    else:
        raise DVFormatError(f"bad 32-bit Roaring cookie {cookie:#010x}")
    header = struct.unpack(f"<{2 * count}H", _take(buf, pos, 4 * count, "container headers"))
    pos += 4 * count
    offsets: tuple[int, ...] | None = None
    if run_flags is None or count >= _NO_OFFSET_THRESHOLD:
        offsets = struct.unpack(f"<{count}I", _take(buf, pos, 4 * count, "container offsets"))
        pos += 4 * count
    containers: list[_Container] = []
    previous_key = -1
    for i in range(count):
        key, cardinality = header[2 * i], header[2 * i + 1] + 1
        if key <= previous_key:
            raise DVFormatError("container keys are not strictly ascending")
        previous_key = key
        if offsets is not None and offsets[i] != pos - start:
            raise DVFormatError(f"container {i} offset {offsets[i]} != actual {pos - start}")
        if run_flags is not None and run_flags[i >> 3] >> (i & 7) & 1:
            (runs,) = struct.unpack("<H", _take(buf, pos, 2, "run count"))
            kind, size = "run", 2 + 4 * runs
        elif cardinality <= _ARRAY_MAX:
            kind, size = "array", 2 * cardinality
        else:
            kind, size = "bitset", _BITSET_BYTES
        containers.append(_Container(key, cardinality, kind, _take(buf, pos, size, kind)))
        pos += size
    return pos, containers


def _walk_64(body: memoryview) -> tuple[int, list[_Bucket]]:
    """Parse the 64-bit portable body; return its end and buckets (keys checked < 2**31)."""
    (count,) = struct.unpack("<Q", _take(body, 0, 8, "bucket count"))
    if count > (len(body) - 8) // 12:  # a bucket is at least a key and an empty bitmap
        raise DVFormatError(f"bitmap claims {count} buckets but has only {len(body)} bytes")
    pos = 8
    buckets: list[_Bucket] = []
    for _ in range(count):
        (key,) = struct.unpack("<I", _take(body, pos, 4, "bucket key"))
        if key > _MAX_KEY:
            raise DVFormatError(
                f"bucket key {key} >= 2**31: Delta row indexes must have the top bit clear (§3.5)"
            )
        if buckets and key <= buckets[-1].key:
            raise DVFormatError("bucket keys are not strictly ascending")
        end, containers = _walk_32(body, pos + 4)
        buckets.append(_Bucket(key, body[pos + 4 : end], containers))
        pos = end
    return pos, buckets


def _java_kind(cardinality: int, runs: int) -> str:
    """The container kind Java RoaringBitmap's ``runOptimize`` picks for a freshly built set."""
    natural, natural_size = (
        ("array", 2 * cardinality) if cardinality <= _ARRAY_MAX else ("bitset", _BITSET_BYTES)
    )
    return "run" if 2 + 4 * runs < natural_size else natural


def _run_pairs(container: _Container) -> list[tuple[int, int]]:
    """(start, length - 1) pairs of a run container."""
    (runs,) = struct.unpack_from("<H", container.data, 0)
    flat = struct.unpack_from(f"<{2 * runs}H", container.data, 2)
    return list(zip(flat[0::2], flat[1::2], strict=True))


def _respell(container: _Container) -> _Container:
    """Rewrite a run container the way Java would have stored it, if that differs."""
    if container.kind != "run":
        return container
    pairs = _run_pairs(container)
    kind = _java_kind(container.cardinality, len(pairs))
    if kind == "run":
        return container
    if kind == "array":
        values = [v for start, extra in pairs for v in range(start, start + extra + 1)]
        data = struct.pack(f"<{len(values)}H", *values)
    else:
        bits = 0
        for start, extra in pairs:
            bits |= ((1 << (extra + 1)) - 1) << start
        data = bits.to_bytes(_BITSET_BYTES, "little")
    return _Container(container.key, container.cardinality, kind, memoryview(data))


def _emit_32(containers: Sequence[_Container]) -> bytes:
    """Write a 32-bit portable RoaringBitmap from its containers (RoaringFormatSpec)."""
    count = len(containers)
    has_run = any(c.kind == "run" for c in containers)
    parts: list[bytes] = []
    if has_run:
        flags = bytearray((count + 7) // 8)
        for i, c in enumerate(containers):
            if c.kind == "run":
                flags[i >> 3] |= 1 << (i & 7)
        parts += [struct.pack("<I", _COOKIE_RUN | (count - 1) << 16), bytes(flags)]
    else:
        parts.append(struct.pack("<II", _COOKIE_NO_RUN, count))
    parts.append(b"".join(struct.pack("<HH", c.key, c.cardinality - 1) for c in containers))
    if not has_run or count >= _NO_OFFSET_THRESHOLD:
        position = sum(map(len, parts)) + 4 * count
        offsets = []
        for c in containers:
            offsets.append(position)
            position += len(c.data)
        parts.append(struct.pack(f"<{count}I", *offsets))
    parts.extend(bytes(c.data) for c in containers)
    return b"".join(parts)


# --- the RoaringBitmapArray blob ---------------------------------------------------------------


def serialize_bitmap(bitmap: AbstractBitMap64) -> bytes:
    """The RoaringBitmapArray blob for ``bitmap``, byte-identical to what Spark writes (§3.5).

    Magic 1681511377 (LE), then one bucket per key ``0..max key`` (Spark's dense form) holding
    Java-``runOptimize``-canonical containers; see the module docstring.

    Raises:
        ValueError: a position is above :data:`MAX_ROW_INDEX`. Delta allows up to 2**63 - 1, but
            the dense form (and Spark's reader) needs one bucket per 2**32 positions below the
            largest; no Parquet file has 2**48 rows, so such a position is a bug upstream.
    """
    if bitmap and bitmap.max() > MAX_ROW_INDEX:
        raise ValueError(f"row index {bitmap.max()} is above {MAX_ROW_INDEX}")
    work = BitMap64(bitmap)  # a mutable copy: run_optimize must not touch the caller's bitmap
    work.run_optimize()
    _, buckets = _walk_64(memoryview(work.serialize()))
    by_key = {bucket.key: bucket for bucket in buckets}
    count = buckets[-1].key + 1 if buckets else 0
    parts = [struct.pack("<IQ", PORTABLE_MAGIC, count)]
    for key in range(count):
        parts.append(struct.pack("<I", key))
        bucket = by_key.get(key)
        if bucket is None:
            parts.append(_EMPTY_32)
            continue
        respelled = [_respell(c) for c in bucket.containers]
        if all(new is old for new, old in zip(respelled, bucket.containers, strict=True)):
            parts.append(bytes(bucket.raw))
        else:
            parts.append(_emit_32(respelled))
    return b"".join(parts)


def deserialize_bitmap(blob: bytes | bytearray) -> BitMap64:
    """Decode a RoaringBitmapArray blob (magic + 64-bit portable body), strictly (§3.5).

    Raises:
        DVFormatError: wrong or legacy magic, a bucket key >= 2**31, a malformed or truncated
            body, or bytes left over after it.
    """
    if len(blob) < 4:
        raise DVFormatError(f"bitmap blob of {len(blob)} bytes is shorter than its 4-byte magic")
    (magic,) = struct.unpack_from("<I", blob, 0)
    if magic != PORTABLE_MAGIC:
        (magic_be,) = struct.unpack_from(">I", blob, 0)
        if magic == NATIVE_MAGIC:
            why = "Spark's legacy native format; only the portable format is in the spec"
        elif magic_be in (PORTABLE_MAGIC, NATIVE_MAGIC):
            why = f"magic {magic_be} written big-endian (the PROTOCOL.md inline example's layout)"
        else:
            why = "not a RoaringBitmapArray"
        raise DVFormatError(f"unsupported bitmap magic {magic} ({why}); expected {PORTABLE_MAGIC}")
    body = memoryview(blob)[4:]
    end, _ = _walk_64(body)
    if end != len(body):
        raise DVFormatError(f"{len(body) - end} unexpected bytes after the bitmap")
    try:
        return BitMap64.deserialize(bytes(body))
    except (ValueError, IndexError) as exc:  # pyroaring's checks on container contents
        raise DVFormatError(f"invalid Roaring bitmap: {exc}") from exc


# --- DV files and ranges (§3.4) ----------------------------------------------------------------


def encode_dv_range(bitmap: AbstractBitMap64) -> bytes:
    """One framed DV: ``u32 BE size | blob | u32 BE CRC-32(blob)`` (what ``offset`` points at)."""
    blob = serialize_bitmap(bitmap)
    return b"".join((struct.pack(">I", len(blob)), blob, struct.pack(">I", zlib.crc32(blob))))


def encode_dv_file(bitmaps: Sequence[AbstractBitMap64]) -> tuple[bytes, list[tuple[int, int]]]:
    """A DV file holding ``bitmaps`` in order, and each one's ``(offset, sizeInBytes)``.

    The first DV is at offset 1, right after the version byte (§3.4).

    Raises:
        ValueError: ``bitmaps`` is empty, or a bitmap cannot be serialized.
    """
    if not bitmaps:
        raise ValueError("a DV file needs at least one deletion vector")
    parts = [bytes([FORMAT_VERSION])]
    ranges: list[tuple[int, int]] = []
    position = 1
    for bitmap in bitmaps:
        framed = encode_dv_range(bitmap)
        parts.append(framed)
        ranges.append((position, len(framed) - _FRAME_OVERHEAD))
        position += len(framed)
    return b"".join(parts), ranges


def decode_dv_range(data: bytes | bytearray, *, offset: int, size_in_bytes: int) -> BitMap64:
    """Decode one framed DV: ``data`` is the object's bytes ``[offset, offset + size + 8)``.

    ``offset`` only labels errors. Checks the stored length against ``sizeInBytes`` and the CRC.

    Raises:
        DVFormatError: truncated or overlong ``data``, length or CRC mismatch, a bad blob.
    """
    expected = size_in_bytes + _FRAME_OVERHEAD
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "too long"
        raise DVFormatError(
            f"DV at offset {offset} {what}: {len(data)} bytes, expected {expected} "
            f"(4-byte length + {size_in_bytes}-byte bitmap + 4-byte CRC-32)"
        )
    (stored,) = struct.unpack_from(">I", data, 0)
    if stored != size_in_bytes:
        raise DVFormatError(
            f"stored length {stored} at offset {offset} != descriptor sizeInBytes {size_in_bytes}"
        )
    blob = data[4 : 4 + size_in_bytes]
    (stored_crc,) = struct.unpack_from(">I", data, 4 + size_in_bytes)
    actual_crc = zlib.crc32(blob)
    if stored_crc != actual_crc:
        raise DVFormatError(
            f"CRC-32 mismatch at offset {offset}: stored {stored_crc:#010x}, "
            f"computed {actual_crc:#010x}"
        )
    return deserialize_bitmap(blob)


def _check_version(first_byte: int) -> None:
    if first_byte != FORMAT_VERSION:
        raise DVFormatError(f"DV file format version {first_byte}, expected {FORMAT_VERSION}")


def decode_dv_file(data: bytes | bytearray) -> list[tuple[int, int, BitMap64]]:
    """Every DV in a whole DV file, as ``(offset, sizeInBytes, bitmap)``; for checks and tools.

    Raises:
        DVFormatError: bad version byte, or any DV fails :func:`decode_dv_range`.
    """
    if not data:
        raise DVFormatError("empty DV file")
    _check_version(data[0])
    found: list[tuple[int, int, BitMap64]] = []
    position = 1
    while position < len(data):
        if len(data) - position < 4:
            raise DVFormatError(f"DV file truncated: stray {len(data) - position} bytes at end")
        (size,) = struct.unpack_from(">I", data, position)
        chunk = data[position : position + size + _FRAME_OVERHEAD]
        found.append((position, size, decode_dv_range(chunk, offset=position, size_in_bytes=size)))
        position += size + _FRAME_OVERHEAD
    return found


def decode_inline_dv(text: str, size_in_bytes: int) -> BitMap64:
    """Decode an inline (``i``) DV: Z85 of the blob zero-padded to a multiple of 4 (§3.6).

    Raises:
        DVFormatError: invalid Z85, a decoded length other than ``sizeInBytes`` rounded up to 4,
            non-zero padding, or a bad blob.
    """
    try:
        raw = z85_decode(text)
    except ValueError as exc:
        raise DVFormatError(f"inline DV is not valid Z85: {exc}") from exc
    padded = size_in_bytes + (-size_in_bytes % 4)
    if len(raw) != padded:
        raise DVFormatError(
            f"inline DV decodes to {len(raw)} bytes, expected {padded} for sizeInBytes "
            f"{size_in_bytes}"
        )
    if any(raw[size_in_bytes:]):
        raise DVFormatError("inline DV has non-zero padding bytes")
    return deserialize_bitmap(raw[:size_in_bytes])


def dv_byte_range(descriptor: DeletionVectorDescriptor) -> tuple[int, int]:
    """The half-open byte range ``[start, end)`` of the DV file to GET for a file DV (§3.4).

    ``[offset, offset + 4 + sizeInBytes + 4)``. When ``offset`` is absent the spec says 0 while
    kernel-rs assumes 1 (§3.1, §9 item 2); every observed writer writes it, and rlcd always
    does. For an absent offset this returns ``[0, sizeInBytes + 9)``, which covers both readings,
    and :func:`load_dv` uses 0 if the stored length there matches, else 1 (the protocol notes'
    advice).

    Raises:
        ValueError: the DV is inline (``i``): it has no file.
    """
    if descriptor.storage_type == "i":
        raise ValueError(f"inline deletion vector {descriptor.unique_id!r} has no byte range")
    size = descriptor.size_in_bytes + _FRAME_OVERHEAD
    if descriptor.offset is None:
        return 0, size + 1
    return descriptor.offset, descriptor.offset + size


def _describe(descriptor: DeletionVectorDescriptor) -> str:
    """How error messages name a DV: its unique id (shortened if inline) and its file."""
    uid = descriptor.unique_id
    if descriptor.storage_type == "i":
        return uid if len(uid) <= 100 else f"{uid[:80]}... ({len(uid)} chars)"
    return f"{uid} ({descriptor.file_path()})"


def _decode_file_dv(
    descriptor: DeletionVectorDescriptor, data: bytes | bytearray, data_start: int | None
) -> BitMap64:
    start, _ = dv_byte_range(descriptor)
    data_start = start if data_start is None else data_start
    size = descriptor.size_in_bytes
    offset = descriptor.offset
    if offset is None:  # see dv_byte_range: 0 per spec if its length field fits, else 1
        head = data[:4] if data_start == 0 else b""
        offset = 0 if len(head) == 4 and struct.unpack(">I", head)[0] == size else 1
    relative = offset - data_start
    if relative < 0:
        raise InternalError(f"DV bytes start at {data_start}, after the DV's offset {offset}")
    if data_start == 0 and offset >= 1 and data:
        _check_version(data[0])
    return decode_dv_range(
        data[relative : relative + size + _FRAME_OVERHEAD], offset=offset, size_in_bytes=size
    )


def load_dv(
    descriptor: DeletionVectorDescriptor,
    *,
    file_bytes: bytes | bytearray | None,
    table: str,
    path: str | None,
    version: int | None = None,
    data_start: int | None = None,
) -> BitMap64:
    """The deleted row positions of one data file, fully checked (§3.4, §3.8).

    Args:
        descriptor: the ``deletionVector`` of the file's ``add``.
        file_bytes: ``None`` for an inline DV; for a file DV, the DV file's bytes from
            ``data_start`` on, normally exactly the :func:`dv_byte_range` GET.
        table, path, version: the table, the data file (``add.path``) and the log version, named
            in every error.
        data_start: the object offset ``file_bytes`` begins at; defaults to the start of
            :func:`dv_byte_range`. Pass 0 with bytes read from the start of the file (cheap for
            the usual offset 1) to have the version byte checked too.

    Raises:
        DeletionVectorError: any format, length, CRC or cardinality failure.
        InternalError: ``file_bytes`` missing for a file DV, or not covering the DV's offset.
    """
    try:
        if descriptor.storage_type == "i":
            if (descriptor.path_or_inline_dv, descriptor.size_in_bytes) == ("", 0):
                bitmap = BitMap64()  # Spark's DeletionVectorDescriptor.EMPTY
            else:
                bitmap = decode_inline_dv(descriptor.path_or_inline_dv, descriptor.size_in_bytes)
        else:
            if file_bytes is None:
                raise InternalError(
                    f"no bytes passed for file deletion vector {descriptor.unique_id!r}"
                )
            bitmap = _decode_file_dv(descriptor, file_bytes, data_start)
        if len(bitmap) != descriptor.cardinality:
            raise DVFormatError(
                f"cardinality mismatch: decoded {len(bitmap)} rows, "
                f"descriptor says {descriptor.cardinality}"
            )
    except DVFormatError as exc:
        raise DeletionVectorError(
            f"deletion vector {_describe(descriptor)}: {exc}",
            table=table,
            version=version,
            path=path,
        ) from exc
    return bitmap
