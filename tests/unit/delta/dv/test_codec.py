"""The DV codec: Spark-identical bytes, strict decoding, errors that name the DV (§3.4-§3.6)."""

from __future__ import annotations

import struct
import zlib
from collections import defaultdict
from itertools import groupby
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap64, FrozenBitMap64

from rlcd.delta.dv import (
    MAX_ROW_INDEX,
    NATIVE_MAGIC,
    PORTABLE_MAGIC,
    DeletionVectorDescriptor,
    DVFormatError,
    decode_dv_file,
    decode_dv_range,
    decode_inline_dv,
    deserialize_bitmap,
    dv_byte_range,
    encode_dv_file,
    encode_dv_range,
    load_dv,
    serialize_bitmap,
)
from rlcd.errors import DeletionVectorError, InternalError

# --- an independent model of what Java RoaringBitmap + Spark write --------------------------------


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """(start, last) of each maximal run of consecutive values."""
    out: list[tuple[int, int]] = []
    for _, group in groupby(enumerate(values), key=lambda iv: iv[1] - iv[0]):
        items = [v for _, v in group]
        out.append((items[0], items[-1]))
    return out


def _reference_32(values: list[int]) -> bytes:
    """A 32-bit portable RoaringBitmap after Java ``runOptimize`` on array/bitset containers."""
    by_high: dict[int, list[int]] = defaultdict(list)
    for v in values:
        by_high[v >> 16].append(v & 0xFFFF)
    containers = []
    for high in sorted(by_high):
        lows = by_high[high]
        runs = _runs(lows)
        natural = 2 * len(lows) if len(lows) <= 4096 else 8192
        if 2 + 4 * len(runs) < natural:
            body = struct.pack("<H", len(runs))
            body += b"".join(struct.pack("<HH", s, e - s) for s, e in runs)
            containers.append((high, len(lows), True, body))
        elif len(lows) <= 4096:
            containers.append((high, len(lows), False, struct.pack(f"<{len(lows)}H", *lows)))
        else:
            bits = sum(1 << v for v in lows)
            containers.append((high, len(lows), False, bits.to_bytes(8192, "little")))
    n = len(containers)
    has_run = any(c[2] for c in containers)
    if has_run:
        flags = sum(1 << i for i, c in enumerate(containers) if c[2])
        head = struct.pack("<I", 12347 | (n - 1) << 16) + flags.to_bytes((n + 7) // 8, "little")
    else:
        head = struct.pack("<II", 12346, n)
    head += b"".join(struct.pack("<HH", c[0], c[1] - 1) for c in containers)
    if not has_run or n >= 4:
        pos = len(head) + 4 * n
        for c in containers:
            head += struct.pack("<I", pos)
            pos += len(c[3])
    return head + b"".join(c[3] for c in containers)


def _reference_blob(positions: set[int]) -> bytes:
    """Spark's RoaringBitmapArray portable blob: dense buckets 0..max key (§3.5)."""
    by_key: dict[int, list[int]] = defaultdict(list)
    for p in sorted(positions):
        by_key[p >> 32].append(p & 0xFFFFFFFF)
    count = max(by_key) + 1 if by_key else 0
    out = struct.pack("<IQ", PORTABLE_MAGIC, count)
    for key in range(count):
        out += struct.pack("<I", key) + _reference_32(by_key.get(key, []))
    return out


# --- strategies ---------------------------------------------------------------------------------


@st.composite
def position_sets(draw: st.DrawFn, max_key: int = 3) -> set[int]:
    """Row positions over a few buckets and containers: points, runs and dense patterns."""
    positions: set[int] = set()
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.integers(0, max_key))
        container = draw(st.sampled_from([0, 1, 2, 0xFFFF]))
        base = key << 32 | container << 16
        shape = draw(st.sampled_from(["points", "range", "pattern"]))
        if shape == "points":
            lows = draw(st.lists(st.integers(0, 0xFFFF), max_size=40))
        elif shape == "range":
            start = draw(st.integers(0, 0xFFFF))
            lows = list(range(start, min(0x10000, start + draw(st.integers(1, 9000)))))
        else:  # runs of `on` values every `period`: bitsets with many or few runs
            period = draw(st.integers(2, 12))
            on = draw(st.integers(1, period - 1))
            limit = draw(st.integers(1000, 0x10000))
            lows = [v for v in range(limit) if v % period < on]
        positions.update(base + low for low in lows)
    return positions


_SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _by_ranges(positions: set[int]) -> BitMap64:
    """The same set built with add_range: CRoaring run containers everywhere."""
    bitmap = BitMap64()
    for start, last in _runs(sorted(positions)):
        bitmap.add_range(start, last + 1)
    return bitmap


# --- byte-exact writing ---------------------------------------------------------------------------


def test_spec_worked_example() -> None:
    """Rows {0, 9} give the 45-byte file of §3.4 (kernel-rs table-with-dv-small), byte for byte."""
    expected = bytes.fromhex(
        "01 00000024 d1d33964 0100000000000000 00000000"
        " 3a300000 01000000 0000 0100 10000000 0000 0900 2a671846"
    )
    data, ranges = encode_dv_file([BitMap64([0, 9])])
    assert data == expected
    assert ranges == [(1, 36)]


def test_empty_bitmap_has_zero_buckets() -> None:
    """An empty DV is the magic and a zero bucket count, as Spark writes for an empty array."""
    assert serialize_bitmap(BitMap64()) == struct.pack("<IQ", PORTABLE_MAGIC, 0)


def test_gap_buckets_are_written_dense() -> None:
    """Spark writes an empty bucket for every missing key below the largest (§3.5)."""
    blob = serialize_bitmap(BitMap64([5, (2 << 32) + 7]))
    assert struct.unpack_from("<Q", blob, 4) == (3,)
    empty_bucket = struct.pack("<I", 1) + struct.pack("<II", 12346, 0)
    assert empty_bucket in blob
    assert blob == _reference_blob({5, (2 << 32) + 7})


@pytest.mark.parametrize(
    ("positions", "run"),
    [
        ({0, 1, 2}, False),  # 3 values, 1 run: 6 bytes either way, Java keeps the array
        ({0, 1, 2, 3}, True),  # 8 > 6
        ({0, 1, 10, 11, 12}, False),  # 5 values, 2 runs: 10 == 10, tie keeps the array
        ({0, 1, 10, 11, 12, 13}, True),  # 12 > 10
        ({0, 1}, False),
        (set(range(0, 8000, 2)), False),  # a large array: 4000 values, 4000 runs
        (set(range(4096)), True),  # 4096 values, one run: the array limit
        (set(range(4097)), True),  # 4097 values: would be a bitset, one run is smaller
        ({v for v in range(0x10000) if v % 32 < 3}, False),  # bitset, 2048 runs: 8194 > 8192
        ({v for v in range(0x10000 - 32) if v % 32 < 3}, True),  # bitset, 2047 runs: 8190
        ({v for v in range(0x10000) if v % 2}, False),  # bitset, 32768 runs
    ],
)
def test_container_choice_matches_java(positions: set[int], run: bool) -> None:
    """Run containers only when strictly smaller, whatever containers the input bitmap had."""
    blob = serialize_bitmap(BitMap64(positions))
    assert blob == _reference_blob(positions)
    assert serialize_bitmap(_by_ranges(positions)) == blob
    (cookie,) = struct.unpack_from("<H", blob, 16)  # after magic, bucket count and key 0
    assert (cookie == 12347) == run


@_SLOW
@given(position_sets())
def test_serialize_matches_reference_model(positions: set[int]) -> None:
    """serialize_bitmap equals the independent Java/Spark model, however the bitmap was built."""
    expected = _reference_blob(positions)
    assert serialize_bitmap(BitMap64(positions, optimize=False)) == expected
    assert serialize_bitmap(BitMap64(positions)) == expected
    assert serialize_bitmap(_by_ranges(positions)) == expected
    assert serialize_bitmap(FrozenBitMap64(positions)) == expected


def test_serialize_leaves_the_input_alone() -> None:
    """Serializing does not run-optimise the caller's bitmap."""
    bitmap = BitMap64(range(100), optimize=False)
    before = bitmap.get_statistics()
    serialize_bitmap(bitmap)
    assert bitmap.get_statistics() == before


def test_serialize_rejects_positions_beyond_the_dense_limit() -> None:
    """A position past 2**48 would need 65536+ dense buckets: a bug upstream, refused."""
    with pytest.raises(ValueError, match="above"):
        serialize_bitmap(BitMap64([MAX_ROW_INDEX + 1]))
    assert deserialize_bitmap(serialize_bitmap(BitMap64([MAX_ROW_INDEX]))) == BitMap64(
        [MAX_ROW_INDEX]
    )


# --- round trips ----------------------------------------------------------------------------------


@_SLOW
@given(position_sets())
def test_bitmap_round_trip(positions: set[int]) -> None:
    """deserialize(serialize(b)) == b, and re-serializing is stable."""
    blob = serialize_bitmap(BitMap64(positions))
    decoded = deserialize_bitmap(blob)
    assert decoded == BitMap64(positions)
    assert serialize_bitmap(decoded) == blob


@_SLOW
@given(st.lists(position_sets(max_key=2), min_size=1, max_size=4))
def test_file_round_trip(sets: list[set[int]]) -> None:
    """A file of several DVs decodes at each returned range and as a whole file."""
    bitmaps = [BitMap64(s) for s in sets]
    data, ranges = encode_dv_file(bitmaps)
    assert data[0] == 1
    assert ranges[0][0] == 1
    for (offset, size), bitmap in zip(ranges, bitmaps, strict=True):
        chunk = data[offset : offset + size + 8]
        assert decode_dv_range(chunk, offset=offset, size_in_bytes=size) == bitmap
        assert encode_dv_range(bitmap) == chunk
    assert decode_dv_file(data) == [(o, s, b) for (o, s), b in zip(ranges, bitmaps, strict=True)]
    assert ranges[-1][0] + ranges[-1][1] + 8 == len(data)


@_SLOW
@given(position_sets())
def test_inline_descriptor_round_trip(positions: set[int]) -> None:
    """An inline descriptor carries the blob in Z85 and loads back to the same set."""
    bitmap = BitMap64(positions)
    descriptor = DeletionVectorDescriptor.inline(bitmap)
    assert descriptor.storage_type == "i"
    assert descriptor.offset is None
    assert descriptor.size_in_bytes == len(serialize_bitmap(bitmap))
    assert descriptor.cardinality == len(bitmap)
    assert load_dv(descriptor, file_bytes=None, table="t", path="f.parquet") == bitmap
    again = DeletionVectorDescriptor.from_json(descriptor.to_json())
    assert again == descriptor


def test_sparse_pyroaring_form_is_read() -> None:
    """pyroaring's own sparse-bucket body (another writer's legal form) decodes too."""
    bitmap = BitMap64([1, (3 << 32) + 1])
    blob = struct.pack("<I", PORTABLE_MAGIC) + bitmap.serialize()
    assert deserialize_bitmap(blob) == bitmap
    assert blob != serialize_bitmap(bitmap)


def test_spark_empty_descriptor_loads_empty() -> None:
    """Spark's DeletionVectorDescriptor.EMPTY (inline, "", 0, 0) is the empty set."""
    empty = DeletionVectorDescriptor("i", "", size_in_bytes=0, cardinality=0)
    assert load_dv(empty, file_bytes=None, table="t", path="f") == BitMap64()


# --- byte ranges and absent offsets ---------------------------------------------------------------


def _file_descriptor(
    bitmap: BitMap64, *, prefix: str = "ab"
) -> tuple[bytes, DeletionVectorDescriptor]:
    data, [(offset, size)] = encode_dv_file([bitmap])
    descriptor = DeletionVectorDescriptor.for_file(
        uuid=UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61"),
        prefix=prefix,
        offset=offset,
        size_in_bytes=size,
        cardinality=len(bitmap),
    )
    return data, descriptor


def test_dv_byte_range() -> None:
    """The range is [offset, offset + 4 + size + 4); absent offsets cover both 0 and 1."""
    data, descriptor = _file_descriptor(BitMap64([0, 9]))
    assert dv_byte_range(descriptor) == (1, len(data))
    no_offset = DeletionVectorDescriptor("u", descriptor.path_or_inline_dv, 36, 2)
    assert dv_byte_range(no_offset) == (0, 45)
    with pytest.raises(ValueError, match="inline"):
        dv_byte_range(DeletionVectorDescriptor.inline(BitMap64([1])))


def test_absent_offset_reads_a_real_file_at_1() -> None:
    """Without an offset, a file whose byte 0 is the version byte is read at offset 1."""
    data, descriptor = _file_descriptor(BitMap64([3, 4]))
    no_offset = DeletionVectorDescriptor("u", descriptor.path_or_inline_dv, 36, 2)
    start, end = dv_byte_range(no_offset)
    assert load_dv(no_offset, file_bytes=data[start:end], table="t", path="f") == BitMap64([3, 4])


def test_absent_offset_reads_spec_layout_at_0() -> None:
    """Without an offset, a length field at byte 0 (the spec's reading) is honoured."""
    framed = encode_dv_range(BitMap64([3, 4]))
    _, descriptor = _file_descriptor(BitMap64([3, 4]))
    no_offset = DeletionVectorDescriptor("u", descriptor.path_or_inline_dv, 36, 2)
    start, end = dv_byte_range(no_offset)
    got = load_dv(no_offset, file_bytes=(framed + b"\x00")[start:end], table="t", path="f")
    assert got == BitMap64([3, 4])


def test_whole_file_checks_version_byte() -> None:
    """Bytes from the file start (data_start=0) are accepted and the version byte checked."""
    data, descriptor = _file_descriptor(BitMap64([3, 4]))
    assert load_dv(descriptor, file_bytes=data, table="t", path="f", data_start=0) == BitMap64(
        [3, 4]
    )


def test_missing_bytes_for_file_dv_is_a_bug() -> None:
    """Calling load_dv for a file DV without its bytes is an InternalError."""
    _, descriptor = _file_descriptor(BitMap64([1]))
    with pytest.raises(InternalError):
        load_dv(descriptor, file_bytes=None, table="t", path="f")


# --- errors ---------------------------------------------------------------------------------------

TABLE = "s3://bucket/sales"
DATA_FILE = "part-00000-abc.snappy.parquet"
DV_FILE = "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"


def _reframe(blob: bytes) -> bytes:
    """A version byte and one framed DV around ``blob``, with a correct length and CRC."""
    return b"\x01" + struct.pack(">I", len(blob)) + blob + struct.pack(">I", zlib.crc32(blob))


def _load_error(
    data: bytes, descriptor: DeletionVectorDescriptor, *, data_start: int | None = None
) -> DeletionVectorError:
    if data_start is None:
        start, end = dv_byte_range(descriptor)
        data = data[start:end]
    with pytest.raises(DeletionVectorError) as info:
        load_dv(
            descriptor,
            file_bytes=data,
            table=TABLE,
            path=DATA_FILE,
            version=7,
            data_start=data_start,
        )
    error = info.value
    message = str(error)
    assert TABLE in message
    assert DATA_FILE in message
    assert "version 7" in message
    assert descriptor.unique_id in message
    assert DV_FILE in message
    assert (error.table, error.version, error.path) == (TABLE, 7, DATA_FILE)
    assert isinstance(error.__cause__, DVFormatError)
    return error


def _base() -> tuple[bytes, DeletionVectorDescriptor]:
    return _file_descriptor(BitMap64([0, 9, 70000]))


def test_crc_mismatch() -> None:
    """A flipped CRC byte fails the checksum."""
    data, descriptor = _base()
    corrupt = data[:-1] + bytes([data[-1] ^ 0xFF])
    assert "CRC-32 mismatch" in str(_load_error(corrupt, descriptor))


def test_flipped_bitmap_byte_fails_crc() -> None:
    """Damage inside the bitmap is caught by the CRC before decoding."""
    data, descriptor = _base()
    corrupt = bytearray(data)
    corrupt[20] ^= 0x01
    assert "CRC-32 mismatch" in str(_load_error(bytes(corrupt), descriptor))


def test_bad_version_byte() -> None:
    """A file whose byte 0 is not 1 is refused when read from its start."""
    data, descriptor = _base()
    message = str(_load_error(b"\x02" + data[1:], descriptor, data_start=0))
    assert "format version 2" in message


def test_stored_size_mismatch() -> None:
    """A length field that disagrees with sizeInBytes is refused."""
    data, descriptor = _base()
    size = descriptor.size_in_bytes
    corrupt = data[:1] + struct.pack(">I", size + 4) + data[5:]
    message = str(_load_error(corrupt, descriptor))
    assert f"stored length {size + 4}" in message


def test_wrong_magic() -> None:
    """A blob with an unknown magic is not a RoaringBitmapArray."""
    data, descriptor = _base()
    blob = data[5:-4]
    corrupt = _reframe(struct.pack("<I", 0xDEADBEEF) + blob[4:])
    assert "unsupported bitmap magic" in str(_load_error(corrupt, descriptor))


def test_legacy_native_magic() -> None:
    """Spark's legacy native magic 1681511376 is refused with a clear reason."""
    data, descriptor = _base()
    blob = data[5:-4]
    corrupt = _reframe(struct.pack("<I", NATIVE_MAGIC) + blob[4:])
    message = str(_load_error(corrupt, descriptor))
    assert "1681511376" in message
    assert "legacy native" in message


def test_protocol_inline_example_is_refused() -> None:
    """The PROTOCOL.md inline example (big-endian legacy layout) is refused clearly (§3.6)."""
    descriptor = DeletionVectorDescriptor(
        "i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L", 40, 6
    )
    with pytest.raises(DeletionVectorError, match="big-endian") as info:
        load_dv(descriptor, file_bytes=None, table=TABLE, path=DATA_FILE)
    assert descriptor.unique_id in str(info.value)


def test_long_inline_ids_are_shortened_in_messages() -> None:
    """A large inline DV is named by the start of its unique id, not kilobytes of Z85."""
    good = DeletionVectorDescriptor.inline(BitMap64(range(0, 20000, 2)))
    descriptor = DeletionVectorDescriptor.from_json({**good.to_json(), "cardinality": 1})
    with pytest.raises(DeletionVectorError, match="cardinality mismatch") as info:
        load_dv(descriptor, file_bytes=None, table=TABLE, path=DATA_FILE)
    message = str(info.value)
    assert descriptor.unique_id[:80] in message
    assert f"({len(descriptor.unique_id)} chars)" in message
    assert len(message) < 400


def test_cardinality_mismatch() -> None:
    """A decoded bitmap whose size differs from the descriptor's cardinality is refused."""
    data, good = _base()
    descriptor = DeletionVectorDescriptor.from_json({**good.to_json(), "cardinality": 4})
    message = str(_load_error(data, descriptor))
    assert "cardinality mismatch: decoded 3 rows, descriptor says 4" in message


def test_truncated_bytes() -> None:
    """A short read (e.g. a ranged GET past the end of a cut-off file) is refused."""
    data, descriptor = _base()
    message = str(_load_error(data[:-3], descriptor, data_start=0))
    assert "truncated" in message


def test_bucket_key_above_2_pow_31() -> None:
    """A bucket key with the top bit set (row index >= 2**63) is refused."""
    blob = struct.pack("<IQI", PORTABLE_MAGIC, 1, 1 << 31) + struct.pack("<II", 12346, 0)
    with pytest.raises(DVFormatError, match="2\\*\\*31"):
        deserialize_bitmap(blob)
    _, good = _base()
    descriptor = DeletionVectorDescriptor.from_json(
        {**good.to_json(), "sizeInBytes": len(blob), "cardinality": 0}
    )
    _load_error(_reframe(blob), descriptor)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\xd1\xd3", "shorter than its 4-byte magic"),
        (struct.pack("<I", PORTABLE_MAGIC) + b"\x01\x00", "truncated"),
        (struct.pack("<IQ", PORTABLE_MAGIC, 5), "claims 5 buckets"),
        (serialize_bitmap(BitMap64([1])) + b"\x00\x00", "2 unexpected bytes"),
        (
            struct.pack("<IQ", PORTABLE_MAGIC, 2)
            + (struct.pack("<I", 1) + struct.pack("<II", 12346, 0)) * 2,
            "not strictly ascending",
        ),
        (struct.pack("<IQI", PORTABLE_MAGIC, 1, 0) + struct.pack("<II", 99, 0), "cookie"),
        (struct.pack("<I", PORTABLE_MAGIC) + b"\x00" * 3, "truncated"),
    ],
)
def test_malformed_blobs(blob: bytes, message: str) -> None:
    """Structural damage in the blob is a DVFormatError saying what is wrong."""
    with pytest.raises(DVFormatError, match=message):
        deserialize_bitmap(blob)


@pytest.mark.parametrize(
    ("text", "size", "message"),
    [
        ("abc~e", 4, "not valid Z85"),
        ("0000000000", 4, "decodes to 8 bytes, expected 4"),
        ("00000000a0", 5, "non-zero padding"),
    ],
)
def test_bad_inline_encoding(text: str, size: int, message: str) -> None:
    """Inline DVs must be well-formed Z85 of exactly the padded blob."""
    with pytest.raises(DVFormatError, match=message):
        decode_inline_dv(text, size)


def test_decode_dv_range_rejects_overlong_input() -> None:
    """More bytes than the DV occupies means the caller sliced wrongly; it is refused."""
    framed = encode_dv_range(BitMap64([1]))
    with pytest.raises(DVFormatError, match="too long"):
        decode_dv_range(framed + b"\x00", offset=1, size_in_bytes=len(framed) - 8)


def test_encode_dv_file_needs_a_bitmap() -> None:
    """An empty DV file is never written."""
    with pytest.raises(ValueError, match="at least one"):
        encode_dv_file([])


def test_decode_dv_file_errors() -> None:
    """Whole-file decoding checks the version byte and stray trailing bytes."""
    with pytest.raises(DVFormatError, match="empty"):
        decode_dv_file(b"")
    data, _ = encode_dv_file([BitMap64([1])])
    with pytest.raises(DVFormatError, match="version 0"):
        decode_dv_file(b"\x00" + data[1:])
    with pytest.raises(DVFormatError, match="stray 2 bytes"):
        decode_dv_file(data + b"\x00\x00")
    assert decode_dv_file(b"\x01") == []
