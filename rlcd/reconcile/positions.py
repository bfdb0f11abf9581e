"""Row positions between deletion vectors (roaring bitmaps) and Arrow arrays. Pure.

A DV can hold millions of positions, so every conversion here is one buffer copy and every
computation a vectorised Arrow kernel: no Python loop runs per row. Nothing here uses numpy,
which the ``rlcd`` command never loads (see ``rlcd.cli.process`` for what that saves).
"""

from __future__ import annotations

import array
import struct
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import AbstractBitMap64, BitMap, FrozenBitMap64

__all__ = ("DeletedRows", "positions_array", "positions_bitmap")
__pure__ = True

_MAX_32: Final = 2**32 - 1
_ONE_BUCKET: Final = struct.pack("<QI", 1, 0)  # 64-bit portable: one bucket, key 0


def positions_array(bitmap: AbstractBitMap64) -> pa.UInt64Array:
    """The bitmap's positions, ascending, as a ``uint64`` array (one buffer copy)."""
    values = bitmap.to_array()
    return pa.Array.from_buffers(pa.uint64(), len(values), [None, pa.py_buffer(values)])


def positions_bitmap(positions: pa.Array) -> FrozenBitMap64:
    """A bitmap of ascending, non-negative integer positions (one buffer copy).

    Below 2**32 (any file of fewer than 4G rows) the 32-bit bitmap is built, about twice as
    fast, and wrapped as the single bucket (key 0) of the 64-bit portable format.
    """
    if not len(positions):
        return FrozenBitMap64()
    if positions[-1].as_py() <= _MAX_32:
        small = BitMap(_values(pc.cast(positions, pa.uint32()), "I"))
        return FrozenBitMap64.deserialize(_ONE_BUCKET + small.serialize())
    return FrozenBitMap64(_values(pc.cast(positions, pa.uint64()), "Q"))


def _values(integers: pa.Array, typecode: str) -> array.array[int]:
    """A null-free integer array's values, its offset applied, as a Python ``array``."""
    width = integers.type.bit_width // 8
    data = memoryview(integers.buffers()[1])
    values = array.array(typecode)
    values.frombytes(data[integers.offset * width : (integers.offset + len(integers)) * width])
    return values


class DeletedRows:
    """A file's DV, ready to mask the rows it deletes out of each batch read in order."""

    __slots__ = ("_bitmap", "_positions")

    def __init__(self, dv: AbstractBitMap64) -> None:
        self._bitmap = dv
        self._positions = positions_array(dv).view(pa.int64())  # below 2**63: row numbers

    def keep_mask(self, start: int, n: int) -> pa.BooleanArray | None:
        """Boolean keep-mask of the physical rows ``[start, start + n)``; None when all live.

        ``rank`` counts the DV's positions up to a row, so the ones in range are a slice of the
        sorted array; scattered into an array of ``n`` nulls, they leave a null at every live row.
        """
        below = self._bitmap.rank(start - 1) if start else 0
        upto = self._bitmap.rank(start + n - 1) if n else below
        if below == upto:
            return None
        rows = pc.subtract(self._positions.slice(below, upto - below), start)
        return pc.is_null(pc.scatter(pa.repeat(False, upto - below), rows, max_index=n - 1))
