"""Thrift's compact protocol, as Parquet footers use it: integers rewritten in place (sans-IO).

``rlcd.parquet._splice`` joins row groups that were encoded apart into one file: it
moves a few integers of a footer (file offsets, ordinals) and keeps every other byte as the
writer wrote it. So nothing is decoded into objects: :func:`struct_fields` finds where each
field of a struct lies, :func:`edit_struct` copies a struct's bytes with the integers it is
told to change re-encoded (a field's header never changes, so the copy stays valid), and
:func:`integer` encodes one. Walking over a value costs a few Python operations per element;
a footer of a few KiB takes well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import Enum
from typing import Final, TypeAlias

__all__ = (
    "Drop",
    "Edits",
    "FieldSpan",
    "struct_fields",
    "edit_struct",
    "integer",
    "binary",
    "list_header",
    "collection",
    "skip",
    "read_integer",
    "read_varint",
    "read_binary",
    "struct_list",
    "write_struct",
)
__pure__ = True

STOP: Final = 0
TRUE: Final = 1
FALSE: Final = 2
BYTE: Final = 3
I16: Final = 4
I32: Final = 5
I64: Final = 6
DOUBLE: Final = 7
BINARY: Final = 8
LIST: Final = 9
SET: Final = 10
MAP: Final = 11
STRUCT: Final = 12
_INTEGERS: Final = frozenset((I16, I32, I64))


class Drop(Enum):
    """The edit that removes a field, value and all, from its struct."""

    FIELD = "drop"


Edits: TypeAlias = Mapping[int, "Callable[[int], int] | Edits | Drop"]
"""Per field id: a function from an integer field's value to its new one, the edits of a
struct field (also applied to every element of a list or set of structs), or
:attr:`Drop.FIELD`."""

FieldSpan: TypeAlias = tuple[int, int, int, int, int]
"""A field as it lies in the bytes: its id, compact type, and where its header starts, its
value starts and its value ends."""


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The plain varint at ``pos`` and the position after it."""
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def read_integer(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it."""
    n, pos = _read_varint(data, pos)
    return (n >> 1) ^ -(n & 1), pos


def read_binary(data: bytes, pos: int) -> tuple[bytes, int]:
    """The binary (or string) value at ``pos`` and the position after it."""
    size, pos = _read_varint(data, pos)
    return data[pos : pos + size], pos + size


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` (as snappy's length preamble) and the position after it.

    Raises:
        ValueError: it runs past the end of ``data``.
    """
    try:
        return _read_varint(data, pos)
    except IndexError:
        raise ValueError(f"a varint runs past the end of its {len(data)} bytes") from None


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def integer(n: int) -> bytes:
    """``n`` as a compact i16, i32 or i64 value (a zigzag varint)."""
    return _varint(n << 1 if n >= 0 else (-n << 1) - 1)


def binary(value: bytes) -> bytes:
    """``value`` as a compact binary value (its length, then its bytes)."""
    return _varint(len(value)) + value


def list_header(element: int, size: int) -> bytes:
    """The header of a list of ``size`` elements of type ``element``."""
    if size < 15:
        return bytes((size << 4 | element,))
    return bytes((0xF0 | element,)) + _varint(size)


def collection(data: bytes, pos: int) -> tuple[int, int, int]:
    """A list or set header at ``pos``: its element type, size, and where the elements start."""
    header = data[pos]
    size = header >> 4
    pos += 1
    if size == 15:
        size, pos = _read_varint(data, pos)
    return header & 0x0F, size, pos


def skip(data: bytes, pos: int, kind: int) -> int:
    """The position after the value of type ``kind`` at ``pos`` (a boolean field's value is
    in its header: none to skip).

    Raises:
        IndexError: the bytes end inside the value.
        ValueError: ``kind`` is not a compact type of Parquet's footer.
    """
    if kind in (TRUE, FALSE):
        return pos
    return _skip(data, pos, kind)


def _skip(data: bytes, pos: int, kind: int) -> int:
    """The position after the value of type ``kind`` at ``pos``."""
    if kind in _INTEGERS:
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if kind == BINARY:
        size, pos = _read_varint(data, pos)
        return pos + size
    if kind == STRUCT:
        return _skip_struct(data, pos)
    if kind in (LIST, SET):
        element, size, pos = collection(data, pos)
        if element in _INTEGERS:
            for _ in range(size):
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            return pos
        if element in (TRUE, FALSE, BYTE):  # a boolean inside a collection is one byte
            return pos + size
        if element == DOUBLE:
            return pos + 8 * size
        for _ in range(size):
            pos = _skip(data, pos, element)
        return pos
    if kind in (TRUE, FALSE, BYTE):
        return pos + 1
    if kind == DOUBLE:
        return pos + 8
    if kind == MAP:
        raise ValueError(f"a map at byte {pos}: Parquet's footer structs have none")
    raise ValueError(f"unknown compact type {kind} at byte {pos}")


def _skip_struct(data: bytes, pos: int) -> int:
    """The position after the struct at ``pos`` (its stop byte included)."""
    while True:
        header = data[pos]
        pos += 1
        if header == STOP:
            return pos
        if not header & 0xF0:  # the field id follows as a varint
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        kind = header & 0x0F
        if kind in _INTEGERS:
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        elif kind not in (TRUE, FALSE):
            pos = _skip(data, pos, kind)


def struct_list(data: bytes, pos: int) -> tuple[list[bytes], int]:
    """The structs of the list at ``pos``, each as its bytes, and the position after the list.

    Raises:
        ValueError: the list's elements are not structs, or the bytes end inside it.
    """
    try:
        element, size, pos = collection(data, pos)
        if element != STRUCT:
            raise ValueError(f"a list of compact type {element} at byte {pos}, not of structs")
        structs = []
        for _ in range(size):
            end = _skip_struct(data, pos)
            structs.append(data[pos:end])
            pos = end
    except IndexError:
        raise ValueError(f"a list runs past the end of its {len(data)} bytes") from None
    return structs, pos


def struct_fields(data: bytes, pos: int = 0) -> Iterator[FieldSpan]:
    """Each field of the struct at ``pos``, in the order written; the struct's closing stop
    byte is at the last field's value end (or at ``pos`` when it has none).

    Raises:
        ValueError: the bytes are not a compact struct (IndexError is turned into it).
    """
    last = 0
    try:
        while True:
            start = pos
            header = data[pos]
            if header == STOP:
                return
            kind, delta = header & 0x0F, header >> 4
            pos += 1
            if delta:
                last += delta
            else:
                last, pos = read_integer(data, pos)
            if kind in (TRUE, FALSE):  # a boolean field's value is its type
                yield last, kind, start, pos, pos
                continue
            end = _skip(data, pos, kind)
            yield last, kind, start, pos, end
            pos = end
    except IndexError:
        raise ValueError(f"a struct runs past the end of its {len(data)} bytes") from None


def _field_header(field: int, kind: int, last: int) -> bytes:
    """The header of ``field`` of type ``kind`` written after field ``last``."""
    if 0 < field - last <= 15:
        return bytes(((field - last) << 4 | kind,))
    return bytes((kind,)) + integer(field)


def write_struct(fields: Iterable[tuple[int, int, bytes]]) -> bytes:
    """A struct of ``fields`` (id, compact type, value bytes as they lie; a boolean's value is
    its type and its bytes empty), in ascending id order, with its stop byte."""
    out: list[bytes] = []
    last = 0
    for field, kind, value in fields:
        out += (_field_header(field, kind, last), value)
        last = field
    return b"".join((*out, bytes((STOP,))))


def edit_struct(data: bytes, pos: int, edits: Edits) -> tuple[bytes, int]:
    """The struct at ``pos`` with ``edits`` applied, and the position after the original.

    A field's header counts its id from the field before it, so the headers after a dropped
    field are written anew; every other byte is kept as it was.

    Raises:
        ValueError: an edited field is not an integer or a struct (or list of structs), or the
            bytes are not a compact struct.
    """
    out: list[bytes] = []
    copied = pos
    field = last = 0
    dropped = False
    try:
        while True:
            start = pos
            header = data[pos]
            pos += 1
            if header == STOP:
                out.append(data[copied:pos])
                return b"".join(out), pos
            kind, delta = header & 0x0F, header >> 4
            if delta:
                field += delta
            else:
                field, pos = read_integer(data, pos)
            edit = edits.get(field)
            if edit is Drop.FIELD:
                out.append(data[copied:start])
                copied = pos = pos if kind in (TRUE, FALSE) else _skip(data, pos, kind)
                dropped = True
                continue
            if dropped:
                out += (data[copied:start], _field_header(field, kind, last))
                copied = pos
            last = field
            if kind in (TRUE, FALSE):
                continue
            if edit is None:
                pos = _skip(data, pos, kind)
                continue
            out.append(data[copied:pos])
            pos = _edit_value(data, pos, kind, field, edit, out)
            copied = pos
    except IndexError:
        raise ValueError(f"a struct runs past the end of its {len(data)} bytes") from None


def _edit_value(
    data: bytes,
    pos: int,
    kind: int,
    field: int,
    edit: Callable[[int], int] | Edits,
    out: list[bytes],
) -> int:
    """Append the edited value of ``field`` at ``pos`` to ``out``; the position after it."""
    if callable(edit):
        if kind not in _INTEGERS:
            raise ValueError(f"field {field} has compact type {kind}, not an integer")
        value, end = read_integer(data, pos)
        out.append(integer(edit(value)))
        return end
    if kind == STRUCT:
        edited, end = edit_struct(data, pos, edit)
        out.append(edited)
        return end
    if kind in (LIST, SET):
        element, size, at = collection(data, pos)
        if element != STRUCT:
            raise ValueError(f"field {field} is a list of type {element}, not of structs")
        out.append(data[pos:at])
        for _ in range(size):
            edited, at = edit_struct(data, at, edit)
            out.append(edited)
        return at
    raise ValueError(f"field {field} has compact type {kind}, not a struct")
