"""One Parquet file from row groups encoded apart, as files of their own (sans-IO).

pyarrow encodes a row group only within one writer, one column after another, so a bin alone
on the machine is bound by one encoding thread while its other core has little to do. Encoded
in parts, as files of their own (a row group's first top-level fields in one, the rest in
another), the two parts can be encoded at once, in two threads; this joins such files, in
row order, into the file a single writer would have written: the magic, each file's column
chunks as they are, then one footer, whose row groups are the files' own (a row group's
parts merged into one) with every file offset moved to where the chunks now lie and their
ordinals renumbered. Everything else in the footer (schema, key-value metadata,
``created_by``, column orders) is that of the first row group's file, which comes whole, and
every later whole file must carry the same bytes, since all come from one writer's settings.
Joined from pyarrow's files, the result is byte for byte the file one pyarrow writer makes
of the same row groups (tested), page indexes aside (rlcd writes none: one writer puts them
all after the last row group, here each follows its own chunks).

The caller parses the finished footer with pyarrow before the file is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from rlcd.parquet._format import (
    FILE_NUM_ROWS,
    FILE_ROW_GROUPS,
    GROUP_COLUMNS,
    row_group_edits,
)
from rlcd.parquet._thrift import (
    STOP,
    STRUCT,
    Edits,
    FieldSpan,
    edit_struct,
    integer,
    list_header,
    read_integer,
    struct_fields,
    struct_list,
)
from rlcd.parquet.footer import MAGIC, footer_span

__all__ = ("SplicedFile",)
__pure__ = True

_GROUP_SIZES: Final = (2, 6)  # total (uncompressed) byte size, total compressed size


@dataclass(frozen=True, slots=True)
class _Layout:
    """The first file's footer, cut around its row group: every file's footer must read the
    same around its own (its row count and row group aside)."""

    head: bytes  # the fields before the row count (version, schema)
    rows_header: bytes  # the row count's field header
    groups_header: bytes  # the row groups' field header and a list header of one struct
    tail: bytes  # the fields after the row groups and the closing stop byte
    chunks: int  # column chunks in a row group

    @classmethod
    def of(cls, footer: bytes) -> _Layout:
        rows, groups, group_at = _row_group_at(footer)
        group, _ = edit_struct(footer, group_at, {})
        return cls(
            chunks=_chunk_count(group),
            head=footer[: rows[2]],
            rows_header=footer[rows[2] : rows[3]],
            groups_header=footer[groups[2] : group_at],
            tail=footer[groups[4] :],
        )


def _row_group_at(footer: bytes) -> tuple[FieldSpan, FieldSpan, int]:
    """A one-row-group footer's row count and row groups fields, and where its row group
    starts."""
    spans = {span[0]: span for span in struct_fields(footer)}
    rows, groups = spans.get(FILE_NUM_ROWS), spans.get(FILE_ROW_GROUPS)
    if rows is None or groups is None or rows[4] != groups[2]:
        raise ValueError("a row group's footer has no row count followed by row groups")
    one = list_header(STRUCT, 1)
    if footer[groups[3] : groups[3] + len(one)] != one:
        raise ValueError("a row group's file must hold exactly one row group")
    return rows, groups, groups[3] + len(one)


def _footer(file: pa.Buffer) -> tuple[bytes, int]:
    """A Parquet file's footer metadata and where its footer starts."""
    size = file.size
    if size < 2 * len(MAGIC) + 4 or file.slice(0, len(MAGIC)).to_pybytes() != MAGIC:
        raise ValueError("a row group's file does not start with the Parquet magic")
    span = footer_span(file.slice(size - 8).to_pybytes(), size)
    start = size - span
    return file.slice(start, span - 8).to_pybytes(), start


def _chunk_count(group: bytes) -> int:
    for field, _, _, value, _ in struct_fields(group):
        if field == GROUP_COLUMNS:
            return len(struct_list(group, value)[0])
    return 0


def _merged(groups: list[bytes]) -> tuple[bytes, int]:
    """One row group of the column chunks of ``groups`` (the same rows, other columns each, in
    column order): the first group's fields, with all the chunks and the summed sizes; and
    how many chunks it holds."""
    chunks: list[bytes] = []
    sizes = dict.fromkeys(_GROUP_SIZES, 0)
    for group in groups:
        for field, _, _, value, _ in struct_fields(group):
            if field == GROUP_COLUMNS:
                chunks.extend(struct_list(group, value)[0])
            elif field in sizes:
                sizes[field] += read_integer(group, value)[0]
    first = groups[0]
    out: list[bytes] = []
    for field, _, start, value, end in struct_fields(first):
        if field == GROUP_COLUMNS:
            out += (first[start:value], list_header(STRUCT, len(chunks)), *chunks)
        elif field in sizes:
            out += (first[start:value], integer(sizes[field]))
        else:
            out.append(first[start:end])
    out.append(bytes((STOP,)))
    return b"".join(out), len(chunks)


class SplicedFile:
    """The bytes of one Parquet file, built from one-row-group files in row order: write
    :data:`MAGIC`, then what :meth:`add` (a whole row group) or :meth:`add_columns` (a row
    group in parts of its columns) returns for each, then :meth:`footer`. The first row group
    comes whole: its file's footer is the template of the file's."""

    def __init__(self) -> None:
        self._position = len(MAGIC)
        self._rows = 0
        self._row_groups: list[bytes] = []
        self._layout: _Layout | None = None

    def add(self, file: pa.Buffer) -> pa.Buffer:
        """Take the next row group's file; returns its column chunks, to be written next.

        Raises:
            ValueError: ``file`` is not a Parquet file of one row group, or its footer differs
                from the first file's elsewhere than in its row group.
        """
        footer, start = _footer(file)
        if self._layout is None:
            self._layout = _Layout.of(footer)
        layout = self._layout
        at = len(layout.head) + len(layout.rows_header)
        if footer[:at] != layout.head + layout.rows_header:
            raise ValueError("a row group's file has another schema than the first")
        rows, at = read_integer(footer, at)
        if footer[at : at + len(layout.groups_header)] != layout.groups_header:
            raise ValueError("a row group's file must hold exactly one row group")
        group, at = edit_struct(footer, at + len(layout.groups_header), self._edits(self._position))
        if footer[at:] != layout.tail:
            raise ValueError("a row group's file has other metadata than the first")
        body = file.slice(len(MAGIC), start - len(MAGIC))
        self._append(rows, group, body.size)
        return body

    def add_columns(self, parts: list[pa.Buffer]) -> list[pa.Buffer]:
        """Take the next row group as files of its columns: each part's file holds the same
        rows of the next top-level fields, in the schema's order, written with the first
        file's settings. Returns each part's column chunks, to be written next in turn.

        Raises:
            ValueError: a part is not a Parquet file of one row group, the parts hold other row
                counts, or not the first file's number of column chunks.
        """
        layout = self._layout
        if layout is None:
            raise ValueError("the first row group must come whole")
        position, counts, groups, bodies = self._position, set(), [], []
        for part in parts:
            footer, start = _footer(part)
            rows, _, group_at = _row_group_at(footer)
            counts.add(read_integer(footer, rows[3])[0])
            group, _ = edit_struct(footer, group_at, self._edits(position))
            groups.append(group)
            body = part.slice(len(MAGIC), start - len(MAGIC))
            bodies.append(body)
            position += body.size
        merged, chunks = _merged(groups)
        if len(counts) != 1:
            raise ValueError(f"column parts of one row group hold {sorted(counts)} rows")
        if chunks != layout.chunks:
            raise ValueError("column parts do not hold the file's column chunks")
        self._append(counts.pop(), merged, position - self._position)
        return bodies

    def _append(self, rows: int, group: bytes, size: int) -> None:
        self._rows += rows
        self._row_groups.append(group)
        self._position += size

    def _edits(self, position: int) -> Edits:
        """What moves in the metadata of the next row group (or part) written at
        ``position``: its offsets, by where it now starts, and its ordinal."""
        return row_group_edits(position - len(MAGIC), len(self._row_groups), drop_indexes=False)

    def footer(self) -> bytes:
        """The footer, its length and the closing magic: the file's last bytes.

        Raises:
            ValueError: no row group was added.
        """
        layout = self._layout
        if layout is None:
            raise ValueError("a Parquet file needs at least one row group")
        groups = layout.groups_header[:-1] + list_header(STRUCT, len(self._row_groups))
        meta = b"".join(
            (
                layout.head,
                layout.rows_header,
                integer(self._rows),
                groups,
                *self._row_groups,
                layout.tail,
            )
        )
        return meta + len(meta).to_bytes(4, "little") + MAGIC
