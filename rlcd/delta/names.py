"""The names rlcd gives the files it writes, and how it recognises them later (pure: no IO).

Outputs look like any Delta writer's: ``part-00000-<uuid>-c000.<codec>.parquet`` data files and
``deletion_vector_<uuid>.bin`` DV files. The UUID is rlcd's own, though: a version-8 UUID
(RFC 9562, "custom") whose first 32 bits spell ``rlcd`` in ASCII. Spark, delta-rs and the kernel
name files with random version-4 UUIDs, which can never carry version 8, so a file whose name
holds such a UUID was written by rlcd, and cleanup can tell rlcd's uncommitted files from any
other writer's by name alone, without opening them. The randomness is a parameter (16 bytes
from the caller), so this module stays pure.
"""

from __future__ import annotations

import re
from uuid import UUID

__all__ = (
    "RLCD_MARK",
    "rlcd_uuid",
    "is_rlcd_uuid",
    "data_file_name",
    "dv_file_name",
    "rlcd_file_uuid",
)
__pure__ = True

RLCD_MARK = 0x726C6364  # b"rlcd"
_VERSION = 8

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_NAMES = (
    re.compile(rf"part-\d{{5}}-(?P<uuid>{_UUID})-c\d{{3}}(?:\.[A-Za-z0-9]+)*\.parquet"),
    re.compile(rf"deletion_vector_(?P<uuid>{_UUID})\.bin"),
)


def rlcd_uuid(entropy: bytes) -> UUID:
    """An rlcd UUID: version 8, RFC 4122 variant, ``rlcd`` in the first 32 bits, the rest from
    ``entropy`` (at least 12 random bytes, e.g. ``os.urandom(16)``)."""
    if len(entropy) < 12:
        raise ValueError(f"need at least 12 bytes of entropy, got {len(entropy)}")
    value = (RLCD_MARK << 96) | int.from_bytes(entropy[:12], "big")
    value &= ~(0xF << 76)
    value |= _VERSION << 76
    value &= ~(0x3 << 62)
    value |= 0x2 << 62
    return UUID(int=value)


def is_rlcd_uuid(value: UUID) -> bool:
    """True when ``value`` is a UUID :func:`rlcd_uuid` could have made."""
    return value.version == _VERSION and (value.int >> 96) == RLCD_MARK


def data_file_name(extension: str, entropy: bytes) -> str:
    """A fresh data file name, shaped like Spark's (``extension``: ``zstd``, ``snappy``, …)."""
    return f"part-00000-{rlcd_uuid(entropy)}-c000.{extension}.parquet"


def dv_file_name(entropy: bytes) -> tuple[UUID, str]:
    """A fresh DV file's UUID (the descriptor carries it) and its name in the table root."""
    uuid = rlcd_uuid(entropy)
    return uuid, f"deletion_vector_{uuid}.bin"


def rlcd_file_uuid(name: str) -> UUID | None:
    """The rlcd UUID in a data or DV file's base name, or None when another writer named it."""
    for pattern in _NAMES:
        match = pattern.fullmatch(name)
        if match is not None:
            uuid = UUID(match["uuid"])
            return uuid if is_rlcd_uuid(uuid) else None
    return None
