"""What to compact: sizes, ratios, the output format and a partition filter. Pure: no IO.

Theory of operation
-------------------
A :class:`CompactionPolicy` is the configured policy (defaults, then TOML or the command line);
:func:`effective_policy` applies a table's own ``delta.targetFileSize``, which wins over the
configuration as it does in Spark and Databricks. The planner (``plan.py``, design §7) reads:

* ``target_file_size`` (default 128 MiB): bins are packed up to this many estimated live bytes.
* ``min_file_size``: files smaller than this are compaction candidates. Unset, it is half the
  target (:attr:`CompactionPolicy.small_file_threshold`), and follows the target when a table
  property changes it. It may never exceed half the target: the planner (``plan.py``) closes
  a next-fit bin only when the next file does not fit, which leaves it more than
  ``target - min`` bytes; with ``2 * min <= target`` that is not a small file again, so a run
  right after a compaction plans nothing, and every small file fits in a bin with another.
  Spark and delta-rs use ``min = target`` (Spark: ``optimize.minFileSize`` =
  ``optimize.maxFileSize`` = 1 GiB; delta-rs: files under ``targetSize``) and so can rewrite
  their own outputs on the next run. A file over half the target is big enough that
  rewriting it buys little.
* ``max_deleted_rows_ratio`` (default 0.05, Spark's ``optimize.maxDeletedRowsRatio``): a file
  whose DV deletes more than this fraction of its rows is rewritten to purge the DV, even alone.
* ``max_bins``: at most this many bins per plan (None: no limit).
* ``partition_filter``: a :class:`~rlcd.delta.predicate.Predicate` (``--where``) that the
  planner binds to the table's partition columns; only files whose partition values make it
  TRUE are candidates.
* ``codec`` and ``row_group_rows``: how the rewrite encodes its outputs.
* ``encodings``: ``adaptive`` (the default: per-column encodings chosen from the data,
  ``encodings.py``) or ``conservative`` (a dictionary on every column while it stays small, for
  readers older than those ``encodings.py`` names).
* ``rewrite``: ``auto`` (the default: row groups that need no re-encoding are copied byte for
  byte, ``rlcd.parquet.copy_plan``) or ``reencode`` (every row is decoded and encoded again).
* ``min_copy_row_group``: the least compressed bytes a row group needs to be copied; smaller
  ones (a streaming writer's) are re-encoded into full row groups.
* ``recompress`` (default false): a row group whose codec is not ``codec`` is re-encoded rather
  than copied (smaller outputs for more CPU).

"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from rlcd.errors import ConfigError, TableError

if TYPE_CHECKING:  # annotations only: `rlcd --help` reads CODECS without loading pyarrow
    from rlcd.delta.predicate import Predicate
    from rlcd.delta.protocol import TableConfig

__all__ = (
    "MIB",
    "DEFAULT_TARGET_FILE_SIZE",
    "DEFAULT_MAX_DELETED_ROWS_RATIO",
    "DEFAULT_ROW_GROUP_ROWS",
    "CODECS",
    "ENCODINGS",
    "REWRITES",
    "DEFAULT_MIN_COPY_ROW_GROUP",
    "TARGET_FILE_SIZE_PROPERTY",
    "CompactionPolicy",
    "parse_byte_size",
    "parse_size",
    "parse_duration",
    "effective_policy",
)
__pure__ = True

MIB: Final = 1024 * 1024
DEFAULT_TARGET_FILE_SIZE: Final = 128 * MIB
DEFAULT_MAX_DELETED_ROWS_RATIO: Final = 0.05
DEFAULT_ROW_GROUP_ROWS: Final = 1024 * 1024  # pyarrow's default row group length
MAX_ROW_GROUP_ROWS: Final = 64 * 1024 * 1024  # pyarrow splits longer row groups silently
CODECS: Final = frozenset({"zstd", "snappy", "gzip", "none"})
"""Parquet codecs every Delta reader handles, spelled as pyarrow's ``compression`` takes them
(``none``: uncompressed). LZ4 (Hadoop framing vs LZ4_RAW) and Brotli are not universal."""

ENCODINGS: Final = ("adaptive", "conservative")
"""How outputs choose their column encodings (the first is the default)."""

REWRITES: Final = ("auto", "reencode")
"""How a bin's rows reach its output (the first is the default): row groups copied where they
can be, or every row re-encoded."""

DEFAULT_MIN_COPY_ROW_GROUP: Final = 4 * MIB
"""Compressed bytes a row group needs to be copied. A streaming writer's row groups (tens or
hundreds of KiB) stay under it and are merged into full ones; pyarrow's, Spark's and
delta-rs' row groups of a large file (tens of MiB) are over it (docs/performance.md)."""

TARGET_FILE_SIZE_PROPERTY: Final = "delta.targetFileSize"

_MAX_LONG: Final = 2**63 - 1

# --- sizes ---------------------------------------------------------------------------------------

_SIZE_RE: Final = re.compile(r"([0-9]+)([a-z]*)")
_UNITS: Final[Mapping[str, int]] = {
    "": 1,
    "b": 1,
    **{u: 1024**p for p, us in enumerate(("k", "m", "g", "t", "p"), 1) for u in (us, us + "b")},
    **{u + "ib": 1024**p for p, u in enumerate(("k", "m", "g", "t", "p"), 1)},
}


def parse_byte_size(text: str) -> int:
    """Bytes from ``"134217728"`` or a number with a binary unit (``"128mb"``, ``"1g"``).

    Accepts what Spark accepts for ``delta.targetFileSize`` (``JavaUtils.byteStringAsBytes``:
    trimmed, case-insensitive, ``b k kb m mb g gb t tb p pb``, all powers of 1024), plus the
    IEC spellings ``kib mib gib tib pib``. No fractions, signs or inner spaces.

    Raises:
        ValueError: not such a size, zero, or above a Delta long.
    """
    match = _SIZE_RE.fullmatch(text.strip().lower())
    if match is None or match[2] not in _UNITS:
        raise ValueError(f"{text!r} is not a byte size (an integer, or one with a unit: 128mb)")
    size = int(match[1]) * _UNITS[match[2]]
    if not 0 < size <= _MAX_LONG:
        raise ValueError(f"{text!r} is out of range (1 byte to 2^63-1 bytes)")
    return size


_PEOPLE_SIZE_RE: Final = re.compile(r"([0-9]+) ?([a-z]*)")
_PREFIXES: Final = ("k", "m", "g", "t", "p")
_PEOPLE_UNITS: Final[Mapping[str, int]] = {
    "": 1,
    "b": 1,
    **{f"{p}b": 1000**i for i, p in enumerate(_PREFIXES, 1)},
    **{f"{p}ib": 1024**i for i, p in enumerate(_PREFIXES, 1)},
}


def parse_size(text: str) -> int:
    """Bytes from a size as people write it (flags, the TOML config): ``"134217728"``,
    ``"128MiB"`` (2^20 each) or ``"100MB"`` (10^6 each), units in any case.

    Unlike :func:`parse_byte_size` (table properties, read as Spark reads them), every unit has
    its real meaning, and a bare ``128m`` is refused since it could mean either.

    Raises:
        ValueError: no integer, an unknown or ambiguous unit.
    """
    match = _PEOPLE_SIZE_RE.fullmatch(text.strip().lower())
    if match is None or match[2] not in _PEOPLE_UNITS:
        hint = ""
        if match is not None and match[2] in _PREFIXES:
            n, u = match[1], match[2].upper()
            hint = (
                f": {n}{u} is ambiguous, write {n}{u}iB (powers of 1024) or {n}{u}B "
                "(powers of 1000)"
            )
        raise ValueError(
            f"{text!r} is not a size (bytes, or an integer with a unit: 128MiB, 100MB){hint}"
        )
    return int(match[1]) * _PEOPLE_UNITS[match[2]]


_DURATION_RE: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds from ``"90"`` (seconds), or a number with a unit: ``250ms 30s 5m 1.5h 7d``.

    Raises:
        ValueError: not such a duration (negative, no number, an unknown unit).
    """
    match = _DURATION_RE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a duration (a number of seconds, or with a unit: 5m)")
    return float(match[1]) * _DURATION_UNITS[match[2]]


# --- the policy ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """The compaction settings of one table (see the module header for each field's meaning).

    Invariants (checked on construction, raising :class:`ConfigError` that names the field):
    sizes are positive integers (``min_file_size`` may be 0: purge DVs only);
    ``2 * min_file_size <= target_file_size``; ``0 <= max_deleted_rows_ratio <= 1``;
    ``max_bins`` is None or at least 1; ``codec`` is one of :data:`CODECS`; ``encodings`` one
    of :data:`ENCODINGS`; ``rewrite`` one of :data:`REWRITES`; ``min_copy_row_group`` >= 1;
    ``1 <= row_group_rows <= MAX_ROW_GROUP_ROWS``.
    """

    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_file_size: int | None = None
    max_deleted_rows_ratio: float = DEFAULT_MAX_DELETED_ROWS_RATIO
    max_bins: int | None = None
    partition_filter: Predicate | None = None
    codec: str = "zstd"
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS
    # the largest deleted fraction of an output that masking a source rewritten by a winning
    # copy-on-write DML may leave (above it the bin aborts instead; design §4)
    max_masked_ratio: float = 0.5
    encodings: str = ENCODINGS[0]
    rewrite: str = REWRITES[0]
    min_copy_row_group: int = DEFAULT_MIN_COPY_ROW_GROUP
    recompress: bool = False

    def __post_init__(self) -> None:
        _check_count("target_file_size", self.target_file_size, minimum=1)
        if self.min_file_size is not None:
            _check_count("min_file_size", self.min_file_size, minimum=0)
            if 2 * self.min_file_size > self.target_file_size:
                raise ConfigError(
                    f"min_file_size ({self.min_file_size} bytes) must be at most half of "
                    f"target_file_size ({self.target_file_size} bytes), so that a full bin "
                    "is never a small file again"
                )
        ratio = self.max_deleted_rows_ratio
        if (
            isinstance(ratio, bool)
            or not isinstance(ratio, int | float)
            or not (math.isfinite(ratio) and 0 <= ratio <= 1)
        ):
            raise ConfigError(f"max_deleted_rows_ratio must be a number in [0, 1], got {ratio!r}")
        if self.max_bins is not None:
            _check_count("max_bins", self.max_bins, minimum=1)
        if self.codec not in CODECS:
            raise ConfigError(
                f"codec must be one of {', '.join(sorted(CODECS))}, got {self.codec!r}"
            )
        _check_count("row_group_rows", self.row_group_rows, minimum=1)
        if self.encodings not in ENCODINGS:
            raise ConfigError(
                f"encodings must be one of {', '.join(ENCODINGS)}, got {self.encodings!r}"
            )
        if self.rewrite not in REWRITES:
            raise ConfigError(f"rewrite must be one of {', '.join(REWRITES)}, got {self.rewrite!r}")
        _check_count("min_copy_row_group", self.min_copy_row_group, minimum=1)
        if not isinstance(self.recompress, bool):
            raise ConfigError(f"recompress must be true or false, got {self.recompress!r}")
        if self.row_group_rows > MAX_ROW_GROUP_ROWS:
            raise ConfigError(
                f"row_group_rows must be at most {MAX_ROW_GROUP_ROWS} (pyarrow's longest row "
                f"group), got {self.row_group_rows}"
            )
        masked = self.max_masked_ratio
        if isinstance(masked, bool) or not isinstance(masked, int | float) or not 0 <= masked <= 1:
            raise ConfigError(f"max_masked_ratio must be a number in [0, 1], got {masked!r}")

    @property
    def small_file_threshold(self) -> int:
        """Files smaller than this are candidates: ``min_file_size``, else half the target."""
        if self.min_file_size is not None:
            return self.min_file_size
        return self.target_file_size // 2


def _check_count(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def effective_policy(base: CompactionPolicy, config: TableConfig) -> CompactionPolicy:
    """``base`` with the table's ``delta.targetFileSize`` as the target, when it sets one.

    An unset ``min_file_size`` follows the new target (half of it); an explicit one stays.
    Idempotent, so applying it to an already effective policy changes nothing.

    Raises:
        TableError: the property is not a byte size (it is table content, not configuration).
        ConfigError: an explicit ``min_file_size`` is more than half of the table's target.
    """
    raw = config.properties.get(TARGET_FILE_SIZE_PROPERTY)
    if raw is None:
        return base
    try:
        target = parse_byte_size(str(raw))
    except ValueError as exc:
        raise TableError(
            f"table property {TARGET_FILE_SIZE_PROPERTY}: {exc}", table=config.table
        ) from exc
    if target == base.target_file_size:
        return base
    try:
        return replace(base, target_file_size=target)
    except ConfigError as exc:
        raise ConfigError(
            f"with its {TARGET_FILE_SIZE_PROPERTY} = {raw!r}: {exc}", table=config.table
        ) from exc
