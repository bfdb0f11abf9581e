"""The tags of a compaction: composition tags on its tombstones (encode, strict parse, tiling)
and the OPTIMIZE target size on its outputs. Pure.

Design §2: every source's RemoveFile carries ``compactedInto`` = ``["<output path>"]`` and
``compactionInfo`` = ``[{"rowOffsetInTarget":o,"sourceNumPhysicalRecords":P}]``, JSON text in
the ordinary string-to-string ``tags`` map. The source's live rows are the output rows
``[o, o + L)`` with ``L = P - cardinality`` and ``cardinality`` from the tombstone's own DV, so
the tag stays O(1) however fragmented the DV is. Databricks Runtime writes the same pair in its
OPTIMIZE commits (protocol notes §2.12), so we write its exact compact form and must read tags
we did not write.

Parsing is strict and total: anything but exactly that shape is "no composition" (``None``),
never an exception, and the caller falls back to aborting (design §4, §5). Tags vanish from
checkpoints (protocol notes §0 item 3), so they are only ever read from the JSON commit that
wrote them, together with that commit's AddFile paths.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from rlcd.delta.actions import RemoveFile

__all__ = (
    "COMPACTED_INTO",
    "COMPACTION_INFO",
    "OPTIMIZE_TARGET_SIZE",
    "optimized_tags",
    "optimized_for",
    "Composition",
    "composition_tags",
    "parse_composition",
    "check_tiling",
)
__pure__ = True

OPTIMIZE_TARGET_SIZE: Final = "OPTIMIZE_TARGET_SIZE"
"""The add tag Spark and Databricks put on OPTIMIZE outputs: the target size they were made for."""
COMPACTED_INTO: Final = "compactedInto"
COMPACTION_INFO: Final = "compactionInfo"
_ROW_OFFSET: Final = "rowOffsetInTarget"
_PHYSICAL: Final = "sourceNumPhysicalRecords"


def optimized_tags(target_file_size: int | None) -> dict[str, str] | None:
    """The tags of a compaction output made for ``target_file_size`` (None: no tags)."""
    if target_file_size is None:
        return None
    return {OPTIMIZE_TARGET_SIZE: str(target_file_size)}


def optimized_for(tags: Mapping[str, str | None] | None) -> int | None:
    """The target size an OPTIMIZE output was made for, from its add's tags; None when the
    file is not one (or the tag is not a positive integer)."""
    raw = (tags or {}).get(OPTIMIZE_TARGET_SIZE)
    if not isinstance(raw, str) or not raw.strip().isdigit():
        return None
    value = int(raw)
    return value if value > 0 else None


def _is_count(value: object) -> TypeGuard[int]:
    """A non-negative JSON integer (``true`` is not one, nor is ``1.0``)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def composition_tags(output_path: str, row_offset: int, physical_records: int) -> dict[str, str]:
    """The two tags for one source, in Databricks' compact JSON (design §2).

    Add them to the source AddFile's own tags on its RemoveFile, never on the output's AddFile.

    Raises:
        ValueError: an empty path, or a count that is not a non-negative integer.
    """
    if not isinstance(output_path, str) or not output_path:
        raise ValueError(f"output path must be a non-empty string, got {output_path!r}")
    for name, value in (("row_offset", row_offset), ("physical_records", physical_records)):
        if not _is_count(value):
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    info = [{_ROW_OFFSET: row_offset, _PHYSICAL: physical_records}]
    return {
        COMPACTED_INTO: json.dumps([output_path], separators=(",", ":"), ensure_ascii=False),
        COMPACTION_INFO: json.dumps(info, separators=(",", ":")),
    }


@dataclass(frozen=True, slots=True)
class Composition:
    """Where one source's live rows sit in its output: rows ``[row_offset, row_offset + live)``.

    Invariants (checked on construction): counts are non-negative integers and
    ``physical_records >= cardinality``.
    """

    source_path: str
    output_path: str
    row_offset: int
    physical_records: int
    cardinality: int

    def __post_init__(self) -> None:
        for name in ("row_offset", "physical_records", "cardinality"):
            value = getattr(self, name)
            if not _is_count(value):
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.physical_records < self.cardinality:
            raise ValueError(
                f"{self.source_path!r} has {self.physical_records} physical rows but "
                f"{self.cardinality} deleted"
            )

    @property
    def live(self) -> int:
        """``L = P - cardinality``: the length of the run (0 for a fully deleted source)."""
        return self.physical_records - self.cardinality


class _Invalid(Exception):
    """Internal: the tag text is not what the strict parser accepts."""


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Invalid  # a repeated member is ambiguous: readers disagree on which wins
    return obj


def _single(tags: Mapping[str, str | None], key: str) -> Any:
    """The one element of the JSON list in ``tags[key]``."""
    text = tags.get(key)
    if not isinstance(text, str):
        raise _Invalid
    try:
        value = json.loads(text, object_pairs_hook=_reject_duplicates)
    except (ValueError, RecursionError) as exc:
        raise _Invalid from exc
    if not isinstance(value, list) or len(value) != 1:
        raise _Invalid
    return value[0]


def parse_composition(remove: RemoveFile, commit_add_paths: Collection[str]) -> Composition | None:
    """The composition a tombstone records, or None if it records none we can trust (§2).

    Accepted: both tags present; each valid JSON (no repeated object members) holding exactly
    one element; ``compactedInto``'s a string that is one of ``commit_add_paths`` (compared
    byte for byte) and not the source itself; ``compactionInfo``'s an object whose
    ``rowOffsetInTarget`` and ``sourceNumPhysicalRecords`` are non-negative integers, with
    ``P >= cardinality`` of the tombstone's DV. Other members of the object are ignored.
    Never raises on bad input.

    Args:
        remove: a RemoveFile from a JSON commit.
        commit_add_paths: the ``path`` of every AddFile in that same commit.
    """
    tags = remove.tags
    if not isinstance(tags, Mapping):
        return None
    try:
        output = _single(tags, COMPACTED_INTO)
        info = _single(tags, COMPACTION_INFO)
    except _Invalid:
        return None
    if not isinstance(output, str) or output == remove.path or output not in commit_add_paths:
        return None
    if not isinstance(info, dict):
        return None
    offset, physical = info.get(_ROW_OFFSET), info.get(_PHYSICAL)
    cardinality = remove.deletion_vector.cardinality if remove.deletion_vector else 0
    if _is_count(offset) and _is_count(physical) and physical >= cardinality:
        return Composition(remove.path, output, offset, physical, cardinality)
    return None


def check_tiling(
    compositions: Sequence[Composition], output_rows: int, *, complete: bool = True
) -> str | None:
    """Check one output's runs (design §2); None if they hold, else the first problem.

    Every composition must name the same output and a different source, and no two runs may
    overlap. With ``complete`` (every source of the output is tagged) the runs must also tile
    the output: sorted by offset (zero-length runs before a longer run at the same offset),
    start at 0, abut, and end at ``output_rows``. Without it the rows between the runs are
    the untagged sources' and only each run's end is checked against ``output_rows``.

    Raises:
        ValueError: ``output_rows`` is negative.
    """
    if not _is_count(output_rows):
        raise ValueError(f"output_rows must be a non-negative integer, got {output_rows!r}")
    outputs = {c.output_path for c in compositions}
    if len(outputs) > 1:
        return f"the runs name {len(outputs)} outputs: {', '.join(sorted(outputs))}"
    seen: set[str] = set()
    cursor = 0
    for c in sorted(compositions, key=lambda c: (c.row_offset, c.live)):
        if c.source_path in seen:
            return f"source {c.source_path!r} has two runs"
        seen.add(c.source_path)
        if c.row_offset < cursor or (complete and c.row_offset > cursor):
            problem = "a gap" if c.row_offset > cursor else "an overlap"
            return (
                f"the run of {c.source_path!r} starts at row {c.row_offset}, "
                f"expected {cursor if complete else f'at least {cursor}'} ({problem})"
            )
        cursor = c.row_offset + c.live
        if not complete and cursor > output_rows:
            return (
                f"the run of {c.source_path!r} ends at row {cursor}, "
                f"past the output's {output_rows} rows"
            )
    if complete and cursor != output_rows:
        return f"the runs cover {cursor} rows but the output has {output_rows}"
    return None
