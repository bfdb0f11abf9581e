"""rlcd's file names: shaped like any Delta writer's, yet recognisable as rlcd's by name alone."""

from __future__ import annotations

import os
import uuid

from hypothesis import given
from hypothesis import strategies as st

from rlcd.delta.names import data_file_name, dv_file_name, is_rlcd_uuid, rlcd_file_uuid, rlcd_uuid


@given(st.binary(min_size=16, max_size=16))
def test_rlcd_uuid_is_a_valid_version_8_uuid_marked_rlcd(entropy: bytes) -> None:
    """Every rlcd UUID parses back as version 8, RFC variant, and is recognised."""
    value = rlcd_uuid(entropy)
    assert value.version == 8
    assert value.variant == uuid.RFC_4122
    assert str(value).startswith("726c6364-")
    assert is_rlcd_uuid(value)
    assert uuid.UUID(str(value)) == value


def test_other_writers_uuids_are_never_recognised() -> None:
    """Random v4 UUIDs (Spark, delta-rs, the kernel) are never taken for rlcd's, even with the
    rlcd prefix."""
    forged = uuid.UUID("726c6364-0000-4000-8000-000000000000")
    assert not is_rlcd_uuid(forged)
    assert all(not is_rlcd_uuid(uuid.uuid4()) for _ in range(1000))


def test_names_are_shaped_like_sparks_and_parse_back() -> None:
    """Data and DV names have the shapes other writers use, and their UUID is found again."""
    name = data_file_name("zstd", os.urandom(16))
    assert name.startswith("part-00000-") and name.endswith("-c000.zstd.parquet")
    found = rlcd_file_uuid(name)
    assert found is not None and is_rlcd_uuid(found)
    dv_uuid, dv_name = dv_file_name(os.urandom(16))
    assert dv_name == f"deletion_vector_{dv_uuid}.bin"
    assert rlcd_file_uuid(dv_name) == dv_uuid


def test_foreign_and_odd_names_are_not_rlcds() -> None:
    """Another writer's files, and names of other shapes, are not rlcd's."""
    assert rlcd_file_uuid(f"part-00000-{uuid.uuid4()}-c000.snappy.parquet") is None
    assert rlcd_file_uuid(f"deletion_vector_{uuid.uuid4()}.bin") is None
    marked = rlcd_uuid(bytes(16))
    assert rlcd_file_uuid(f"x-{marked}.parquet") is None
    assert rlcd_file_uuid(f"part-00000-{marked}-c000.zstd.parquet.tmp") is None
    assert rlcd_file_uuid(f"part-00001-{marked}-c000.snappy.parquet") == marked
