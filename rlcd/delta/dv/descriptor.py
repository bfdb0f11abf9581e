"""The ``deletionVector`` descriptor of an ``add``/``remove`` action (protocol notes §3.1, §3.3).

Pure. A descriptor is parsed once from log JSON (or a checkpoint row turned into a dict) and
written back in Spark's key order, keeping fields rlcd does not know, because a compaction
``remove`` must carry exactly the live descriptor (§0 item 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote
from uuid import UUID

from rlcd.delta.dv._codec import serialize_bitmap
from rlcd.delta.dv._z85 import ALPHABET, z85_decode, z85_encode

if TYPE_CHECKING:
    from pyroaring import AbstractBitMap64

__all__ = ("DeletionVectorDescriptor", "UUID_TAIL")
__pure__ = True

_STORAGE_TYPES: Final = ("u", "i", "p")
_JSON_KEYS: Final = ("storageType", "pathOrInlineDv", "offset", "sizeInBytes", "cardinality")
_UUID_CHARS: Final = 20  # Z85 of a 16-byte UUID
_Z85: Final = "".join(c if c.isalnum() else "\\" + c for c in ALPHABET)  # a regex class
_Z85_LEAD: Final = _Z85.removesuffix(r"\%\$\#")  # digits 0-81: a group that fits 32 bits
UUID_TAIL: Final = f"(?:[{_Z85_LEAD}][{_Z85}]{{4}}){{4}}$"
"""A regex (RE2's and Python's) that tells most valid ``u`` values in bulk: 20 Z85 characters
at the end, each 5-character group led by a digit below 82. A value that does not match may
still be valid (a group led by ``%``, ``$`` or ``#`` below 2**32): the constructor decides."""


def _check_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor:
    """Where a data file's deletion vector lives and how big it is (§3.1).

    Invariants (checked on construction): ``storage_type`` is ``u`` (UUID-named file relative to
    the table), ``i`` (inline) or ``p`` (absolute path); a ``u`` value ends in 20 valid Z85
    characters (the UUID) after an optional prefix; a ``p`` value is non-empty; sizes, offset
    and cardinality are non-negative integers. ``cardinality == 0`` means "no rows deleted".
    ``extra`` holds unknown JSON fields verbatim; null ones are dropped (checkpoint rows carry
    every struct field, e.g. ``maxRowIndex: null``, and null means absent). ``extra`` takes no
    part in hashing.
    """

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.storage_type not in _STORAGE_TYPES:
            raise ValueError(
                f"unsupported storageType {self.storage_type!r} (expected one of u, i, p)"
            )
        if not isinstance(self.path_or_inline_dv, str):
            raise TypeError(f"pathOrInlineDv must be a string, got {self.path_or_inline_dv!r}")
        _check_int("sizeInBytes", self.size_in_bytes)
        _check_int("cardinality", self.cardinality)
        if self.offset is not None:
            _check_int("offset", self.offset)
        if self.storage_type == "u":
            encoded = self.path_or_inline_dv[-_UUID_CHARS:]
            if len(encoded) != _UUID_CHARS:
                raise ValueError(
                    f"a 'u' pathOrInlineDv needs at least {_UUID_CHARS} characters, "
                    f"got {self.path_or_inline_dv!r}"
                )
            z85_decode(encoded)  # raises ValueError on a bad UUID encoding
        elif self.storage_type == "p" and not self.path_or_inline_dv:
            raise ValueError("a 'p' deletion vector needs a path")
        extra = dict(self.extra)
        clash = sorted(set(extra) & set(_JSON_KEYS))
        if clash:
            raise ValueError(f"extra repeats known fields {clash}")
        object.__setattr__(self, "extra", {k: v for k, v in extra.items() if v is not None})

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DeletionVectorDescriptor:
        """Parse a ``deletionVector`` JSON object (or checkpoint struct as a dict), strictly.

        Raises:
            ValueError: not an object, a required field missing or null, or a bad value/type.
        """
        if not isinstance(obj, Mapping):
            raise ValueError(f"deletionVector must be a JSON object, got {obj!r}")
        required = ("storageType", "pathOrInlineDv", "sizeInBytes", "cardinality")
        missing = [key for key in required if obj.get(key) is None]
        if missing:
            raise ValueError(f"deletionVector {dict(obj)!r} lacks {', '.join(missing)}")
        try:
            return cls(
                storage_type=obj["storageType"],
                path_or_inline_dv=obj["pathOrInlineDv"],
                size_in_bytes=obj["sizeInBytes"],
                cardinality=obj["cardinality"],
                offset=obj.get("offset"),
                extra={k: v for k, v in obj.items() if k not in _JSON_KEYS},
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid deletionVector {dict(obj)!r}: {exc}") from exc

    def to_json(self) -> dict[str, Any]:
        """The JSON object in Spark's key order, ``offset`` only when set, then ``extra``."""
        out: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        out["sizeInBytes"] = self.size_in_bytes
        out["cardinality"] = self.cardinality
        out.update(self.extra)
        return out

    @property
    def unique_id(self) -> str:
        """``storageType + pathOrInlineDv [+ "@" + offset]``: half of the log-replay key (§0.2)."""
        base = self.storage_type + self.path_or_inline_dv
        return base if self.offset is None else f"{base}@{self.offset}"

    def file_path(self) -> str | None:
        """Where the DV file is: relative to the table root for ``u``, absolute for ``p``.

        ``u``: ``<prefix>/deletion_vector_<uuid>.bin`` (or no directory when the prefix is
        empty, Spark's ``assembleDeletionVectorPath``; §3.3). ``p``: the URI-decoded path
        (``unquote``, never ``unquote_plus``; §0 item 19). ``i``: ``None``.
        """
        if self.storage_type == "i":
            return None
        if self.storage_type == "p":
            return unquote(self.path_or_inline_dv)
        prefix = self.path_or_inline_dv[:-_UUID_CHARS]
        uuid = UUID(bytes=z85_decode(self.path_or_inline_dv[-_UUID_CHARS:]))
        name = f"deletion_vector_{uuid}.bin"
        return f"{prefix}/{name}" if prefix else name

    @classmethod
    def for_file(
        cls, *, uuid: UUID, prefix: str = "", offset: int, size_in_bytes: int, cardinality: int
    ) -> DeletionVectorDescriptor:
        """A ``u`` descriptor for a DV rlcd wrote to ``[<prefix>/]deletion_vector_<uuid>.bin``.

        ``prefix`` must be ASCII alphanumeric (what Spark's random prefixes are, so the name
        needs no escaping).
        """
        if prefix and not (prefix.isascii() and prefix.isalnum()):
            raise ValueError(f"DV file prefix must be ASCII alphanumeric, got {prefix!r}")
        return cls(
            storage_type="u",
            path_or_inline_dv=prefix + z85_encode(uuid.bytes),
            size_in_bytes=size_in_bytes,
            cardinality=cardinality,
            offset=offset,
        )

    @classmethod
    def inline(cls, bitmap: AbstractBitMap64) -> DeletionVectorDescriptor:
        """An ``i`` descriptor carrying ``bitmap`` in the portable format (§3.6).

        ``pathOrInlineDv`` is the Z85 of the blob zero-padded to a multiple of 4; ``sizeInBytes``
        the unpadded blob length. Not the legacy layout of the PROTOCOL.md example (§0 item 6).
        """
        blob = serialize_bitmap(bitmap)
        return cls(
            storage_type="i",
            path_or_inline_dv=z85_encode(blob),
            size_in_bytes=len(blob),
            cardinality=len(bitmap),
        )
