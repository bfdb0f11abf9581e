"""Partition values and partition paths: parse ``partitionValues``, build directories, encode paths.

Pure: no IO, no clock.

Theory of operation
-------------------
*Values* (protocol notes §2.11). ``add.partitionValues`` maps physical column names to strings.
A null is JSON ``null`` (what Spark writes) or ``""`` (what the spec says); both parse to
``None``. ``parse_partition_value`` turns a raw string into the Python value of the column's
type; ``partition_scalar`` / ``partition_array`` turn it into Arrow, for materialising partition
columns. rlcd never re-serialises these values: a compaction copies the source files' map
verbatim (§2.11), so parsing only has to be faithful, not to round-trip text.

A ``timestamp`` value comes in two forms: ISO-8601 with a zone (``2024-01-01T10:00:00.000000Z``,
current Spark) or the legacy ``2021-09-08 11:11:11[.ffffff]`` written in the *writer's session
time zone*, which the log does not record. We read the legacy form as UTC, as delta-rs and
delta-kernel-rs do; Spark readers in another session zone would see a shifted instant.

*Paths* (protocol notes §2.10, §0 item 19). A partition directory is ``col=value`` per partition
column, where column and value are Hive-escaped (``:`` → ``%3A``; null or empty →
``__HIVE_DEFAULT_PARTITION__``). The relative path written to ``add.path`` is then URI-encoded
as a whole, so that escape's ``%`` becomes ``%25`` (``%3A`` → ``%253A``). We encode with a
conservative safe set, keeping only ``A-Z a-z 0-9 - . _ ~ / =`` raw and percent-encoding the
UTF-8 bytes of everything else. Spark (Hadoop ``Path.toUri``) leaves more characters raw
(space aside: ``+``, ``@``, non-ASCII); that is fine, because every reader decodes once with
plain percent-decoding, and ``decode_uri_path(encode_uri_path(p)) == p`` for every relative
path. Decoding is ``urllib.parse.unquote``, never ``unquote_plus``: ``+`` is a literal plus.
"""

from __future__ import annotations

import re
import struct
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Final, TypeAlias
from urllib.parse import quote, unquote

import pyarrow as pa

from rlcd.delta.schema import DataType, DecimalType, PrimitiveType, to_arrow_type

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = (
    "PartitionValue",
    "HIVE_DEFAULT_PARTITION",
    "parse_partition_value",
    "partition_scalar",
    "partition_array",
    "hive_escape",
    "hive_unescape",
    "partition_dir",
    "encode_uri_path",
    "decode_uri_path",
    "object_key",
)
__pure__ = True

PartitionValue: TypeAlias = bool | int | float | Decimal | str | bytes | date | datetime | None

HIVE_DEFAULT_PARTITION: Final = "__HIVE_DEFAULT_PARTITION__"


# --- values (§2.11) -----------------------------------------------------------------------------

_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE: Final = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)",
    re.IGNORECASE,
)
_DECIMAL_RE: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DATE_RE: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIMESTAMP_RE: Final = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?"
    r"(Z|[+-][0-9]{2}:?[0-9]{2})?"
)
_INT_BITS: Final = {"byte": 8, "short": 16, "integer": 32, "long": 64}
_DECIMAL_CONTEXT: Final = Context(prec=100)


def parse_partition_value(raw: str | None, dtype: DataType) -> PartitionValue:
    """The value of one ``partitionValues`` entry, typed per the column (protocol notes §2.11).

    Returns ``int`` (byte/short/integer/long), ``float`` (float values rounded to float32),
    ``Decimal`` (at the column's scale), ``bool``, ``date``, ``datetime`` (UTC-aware for
    ``timestamp``, naive for ``timestamp_ntz``), ``bytes`` (binary: the string's UTF-8 bytes),
    ``str``, or ``None`` for null (``None`` or ``""``).

    Raises:
        ValueError: ``raw`` is not a valid value of the type, or the type cannot partition.
    """
    if raw is None or raw == "":
        return None
    try:
        if isinstance(dtype, DecimalType):
            return _parse_decimal(raw, dtype)
        if isinstance(dtype, PrimitiveType) and dtype.name in _PARSERS:
            return _PARSERS[dtype.name](raw)
    except ValueError as exc:
        raise ValueError(
            f"partition value {raw!r} is not a valid {_type_name(dtype)}: {exc}"
        ) from exc
    raise ValueError(f"type {_type_name(dtype)} cannot be a partition column type")


def partition_scalar(raw: str | None, dtype: DataType) -> Any:
    """The partition value as a typed ``pa.Scalar`` (a null scalar of the type for null)."""
    return pa.scalar(parse_partition_value(raw, dtype), type=to_arrow_type(dtype))


def partition_array(raw: str | None, dtype: DataType, length: int) -> Any:
    """A constant ``pa.Array`` of ``length`` copies of the partition value (to materialise it)."""
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    return pa.repeat(partition_scalar(raw, dtype), length)


def _type_name(dtype: DataType) -> str:
    if isinstance(dtype, PrimitiveType):
        return dtype.name
    if isinstance(dtype, DecimalType):
        return f"decimal({dtype.precision},{dtype.scale})"
    return type(dtype).__name__


def _parse_int(bits: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        if not _INT_RE.fullmatch(raw):
            raise ValueError("not an integer")
        value = int(raw)
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise ValueError(f"out of range for a {bits}-bit integer")
        return value

    return parse


def _parse_double(raw: str) -> float:
    if not _FLOAT_RE.fullmatch(raw):
        raise ValueError("not a floating-point number")
    return float(raw)


def _parse_float(raw: str) -> float:
    """A float32 value: rounded so that it equals what an Arrow float32 holds."""
    value = _parse_double(raw)
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        raise ValueError("out of range for float") from None
    return rounded


def _parse_decimal(raw: str, dtype: DecimalType) -> Decimal:
    """A decimal at exactly ``dtype.scale``; refuses values that would need rounding."""
    if not _DECIMAL_RE.fullmatch(raw):
        raise ValueError("not a decimal number")
    try:
        value = Decimal(raw).quantize(Decimal(1).scaleb(-dtype.scale), context=_DECIMAL_CONTEXT)
    except InvalidOperation:
        raise ValueError("out of range") from None
    if value != Decimal(raw):
        raise ValueError(f"has more than {dtype.scale} digits after the point")
    if len(value.as_tuple().digits) > dtype.precision and value != 0:
        raise ValueError(f"has more than {dtype.precision} digits")
    return value


def _parse_boolean(raw: str) -> bool:
    lowered = raw.lower()
    if lowered not in ("true", "false"):
        raise ValueError("not true or false")
    return lowered == "true"


def _parse_date(raw: str) -> date:
    match = _DATE_RE.fullmatch(raw)
    if not match:
        raise ValueError("not YYYY-MM-DD")
    return date(int(match[1]), int(match[2]), int(match[3]))


def _parse_timestamp(raw: str) -> datetime:
    """UTC-aware. The zone-less legacy form is read as UTC (see the module header)."""
    naive, offset = _split_timestamp(raw)
    try:
        return (naive - offset).replace(tzinfo=UTC)
    except OverflowError:
        raise ValueError("out of range") from None


def _parse_timestamp_ntz(raw: str) -> datetime:
    return _split_timestamp(raw, zoned=False)[0]


def _split_timestamp(raw: str, *, zoned: bool = True) -> tuple[datetime, timedelta]:
    """The wall-clock time and the UTC offset of ``raw`` (zero when it names none)."""
    match = _TIMESTAMP_RE.fullmatch(raw)
    if not match:
        raise ValueError("not YYYY-MM-DD HH:MM:SS[.ffffff] or ISO-8601")
    if match[8] and not zoned:
        raise ValueError("timestamp_ntz values carry no time zone")
    fraction = (match[7] or "").ljust(9, "0")
    if fraction[6:] != "000":
        raise ValueError("finer than microseconds")
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    naive = datetime(year, month, day, hour, minute, second, int(fraction[:6]))
    return naive, _utc_offset(match[8])


def _utc_offset(zone: str | None) -> timedelta:
    if not zone or zone == "Z":
        return timedelta(0)
    digits = zone[1:].replace(":", "")
    offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return offset if zone[0] == "+" else -offset


def _parse_binary(raw: str) -> bytes:
    return raw.encode("utf-8")


def _parse_string(raw: str) -> str:
    return raw


_PARSERS: Final[Mapping[str, Callable[[str], PartitionValue]]] = {
    **{name: _parse_int(bits) for name, bits in _INT_BITS.items()},
    "float": _parse_float,
    "double": _parse_double,
    "boolean": _parse_boolean,
    "date": _parse_date,
    "timestamp": _parse_timestamp,
    "timestamp_ntz": _parse_timestamp_ntz,
    "binary": _parse_binary,
    "string": _parse_string,
}


# --- directories and paths (§2.10) -------------------------------------------------------------

_HIVE_ESCAPED: Final = frozenset(
    [chr(c) for c in range(0x20)]
    + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\"]
    + ["\x7f", "{", "[", "]", "^"]
)
_HIVE_ESCAPE_RE: Final = re.compile(r"%([0-9A-Fa-f]{2})")
_URI_SAFE: Final = "/="  # with quote()'s own A-Z a-z 0-9 - . _ ~


def hive_escape(value: str | None) -> str:
    """Escape one partition directory component the way Hive/Spark do (§2.10, layer 1).

    ``None`` and ``""`` become ``__HIVE_DEFAULT_PARTITION__``.
    """
    if not value:
        return HIVE_DEFAULT_PARTITION
    return "".join(f"%{ord(c):02X}" if c in _HIVE_ESCAPED else c for c in value)


def hive_unescape(component: str) -> str:
    """Undo ``hive_escape`` on a directory component (``%XX`` → the character)."""
    return _HIVE_ESCAPE_RE.sub(lambda m: chr(int(m[1], 16)), component)


def partition_dir(
    partition_values: Mapping[str, str | None], partition_columns_physical: Sequence[str]
) -> str:
    """The decoded relative directory of a file with these partition values (§2.10).

    ``col=value`` per partition column in ``partition_columns_physical`` order, each side
    Hive-escaped, joined by ``/``; ``""`` for an unpartitioned table. Values are the raw
    ``partitionValues`` strings. URI-encode the result with ``encode_uri_path``.

    Raises:
        ValueError: ``partition_values`` lacks a partition column.
    """
    parts = []
    for column in partition_columns_physical:
        if column not in partition_values:
            raise ValueError(f"partitionValues has no entry for partition column {column!r}")
        parts.append(f"{hive_escape(column)}={hive_escape(partition_values[column])}")
    return "/".join(parts)


def encode_uri_path(relative_path: str) -> str:
    """Percent-encode a decoded relative path for ``add.path`` (§2.10, layer 2).

    Keeps ``A-Z a-z 0-9 - . _ ~ / =`` and encodes the UTF-8 bytes of everything else, so
    ``decode_uri_path(encode_uri_path(p)) == p``.

    Raises:
        ValueError: the path is empty, absolute, or has an empty, ``.`` or ``..`` segment
            (URI normalisation by readers would change such a path).
    """
    if not relative_path or relative_path.startswith("/"):
        raise ValueError(f"not a relative file path: {relative_path!r}")
    if any(segment in ("", ".", "..") for segment in relative_path.split("/")):
        raise ValueError(f"path has an empty, '.' or '..' segment: {relative_path!r}")
    return quote(relative_path, safe=_URI_SAFE, encoding="utf-8", errors="strict")


def decode_uri_path(path: str) -> str:
    """Decode an ``add.path``/``remove.path`` URI once (§0 item 19): ``+`` stays a plus.

    Raises:
        ValueError: a percent-escape decodes to invalid UTF-8.
    """
    return unquote(path, encoding="utf-8", errors="strict")


def object_key(root: str, path: str) -> str | None:
    """The store key (relative to the table root, decoded) of a file named in the log.

    ``path`` is as written in the log: a relative URI, or an absolute one (``s3://…``, and
    Hadoop's ``s3a://…``/``s3n://…``, ``file:/…``, ``file:///…``) that must lie under ``root``
    (the store's root URI). Returns
    None for an absolute path outside the table.
    """
    if "://" not in path and not path.startswith(("file:", "/")):
        return decode_uri_path(path)
    absolute = decode_uri_path(path)
    if absolute.startswith("/"):
        absolute = "file://" + absolute
    elif absolute.startswith("file:/") and not absolute.startswith("file://"):
        absolute = "file://" + absolute[len("file:") :]
    elif absolute.startswith(("s3a://", "s3n://")):  # Hadoop's names for the same S3 object
        absolute = "s3://" + absolute[len("s3a://") :]
    prefix = root.rstrip("/") + "/"
    return absolute[len(prefix) :] if absolute.startswith(prefix) else None
