"""A Parquet file's footer on its own: where it lies in the file's tail, and parsed without the
file's data (verify reads only a file's tail; source reading renames one key in a copy).
Pure: bytes in, the caller reads them."""

from __future__ import annotations

from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ("MAGIC", "footer_span", "parse_footer")
__pure__ = True

MAGIC: Final = b"PAR1"


def footer_span(tail: bytes | bytearray, size: int) -> int:
    """How many bytes at the end of a ``size``-byte Parquet file hold its footer (metadata,
    its 4-byte length, the magic), from at least its last 8 bytes.

    Raises:
        ValueError: the tail is not a Parquet footer's.
    """
    if len(tail) < 8 or tail[-4:] != MAGIC:
        raise ValueError("the file does not end in the Parquet magic PAR1")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 + len(MAGIC) > size:
        raise ValueError(f"the footer claims {length} bytes of a {size}-byte file")
    return length + 8


def parse_footer(footer: bytes | bytearray) -> pq.FileMetaData:
    """Parse a footer (the span :func:`footer_span` measures) alone: behind a leading magic it
    reads as a file with no data pages (pyarrow gets a native buffer, never a Python file
    object: see pitfalls).

    Raises:
        pyarrow.ArrowException: the footer does not parse.
    """
    return pq.read_metadata(pa.BufferReader(MAGIC + footer))
