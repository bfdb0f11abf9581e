"""DeletionVectorDescriptor: strict parsing, Spark key order, ids and paths (§3.1, §3.3)."""

from __future__ import annotations

import json
import re
from typing import Any
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroaring import BitMap64

from rlcd.delta.dv import DeletionVectorDescriptor, z85_encode
from rlcd.delta.dv.descriptor import UUID_TAIL

SPEC_U: dict[str, Any] = {
    "storageType": "u",
    "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
    "offset": 4,
    "sizeInBytes": 40,
    "cardinality": 6,
}


def test_spec_u_example() -> None:
    """The spec's ``u`` example names ``ab/deletion_vector_<uuid>.bin`` and its unique id."""
    descriptor = DeletionVectorDescriptor.from_json(SPEC_U)
    assert descriptor.file_path() == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    assert descriptor.unique_id == "uab^-aqEH.-t@S}K{vb[*k^@4"


def test_json_round_trip_keeps_spark_key_order() -> None:
    """to_json writes storageType, pathOrInlineDv, offset, sizeInBytes, cardinality, extra."""
    line = (
        '{"storageType":"u","pathOrInlineDv":"vBn[lx{q8@P<9BNH/isA","offset":1,'
        '"sizeInBytes":36,"cardinality":2,"maxRowIndex":9,"future":{"x":[1]}}'
    )
    descriptor = DeletionVectorDescriptor.from_json(json.loads(line))
    assert descriptor.extra == {"maxRowIndex": 9, "future": {"x": [1]}}
    assert json.dumps(descriptor.to_json(), separators=(",", ":")) == line


def test_offset_absent_is_omitted_and_not_in_unique_id() -> None:
    """Without an offset the JSON has no offset key and the unique id no ``@``."""
    descriptor = DeletionVectorDescriptor.from_json({**SPEC_U, "offset": None})
    assert descriptor.offset is None
    assert "offset" not in descriptor.to_json()
    assert descriptor.unique_id == "uab^-aqEH.-t@S}K{vb[*k^"


def test_checkpoint_nulls_are_dropped() -> None:
    """A checkpoint struct's null fields (maxRowIndex, offset) mean absent."""
    row = {**SPEC_U, "maxRowIndex": None}
    assert DeletionVectorDescriptor.from_json(row) == DeletionVectorDescriptor.from_json(SPEC_U)
    assert "maxRowIndex" not in DeletionVectorDescriptor.from_json(row).to_json()


def test_descriptor_is_hashable_and_extra_is_a_copy() -> None:
    """Descriptors hash (extra excluded) and do not alias the caller's dict."""
    extra: dict[str, Any] = {"maxRowIndex": 9}
    descriptor = DeletionVectorDescriptor("u", SPEC_U["pathOrInlineDv"], 40, 6, 4, extra)
    extra["maxRowIndex"] = 10
    assert descriptor.extra == {"maxRowIndex": 9}
    assert hash(descriptor) == hash(DeletionVectorDescriptor.from_json(SPEC_U))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("s3://bucket/table/dv%20dir/x.bin", "s3://bucket/table/dv dir/x.bin"),
        ("s3://bucket/a+b/x.bin", "s3://bucket/a+b/x.bin"),  # '+' is a literal plus
        ("file:///tmp/t/deletion_vector_1.bin", "file:///tmp/t/deletion_vector_1.bin"),
    ],
)
def test_absolute_path(value: str, expected: str) -> None:
    """``p`` paths are URI-decoded with unquote, never unquote_plus."""
    descriptor = DeletionVectorDescriptor("p", value, 36, 2, 1)
    assert descriptor.file_path() == expected
    assert descriptor.unique_id == f"p{value}@1"


def test_inline_has_no_file() -> None:
    """An inline DV has no file path."""
    assert DeletionVectorDescriptor.inline(BitMap64([1])).file_path() is None


@given(st.uuids(), st.text(alphabet="abcXYZ019", max_size=3))
def test_for_file(uuid: UUID, prefix: str) -> None:
    """for_file encodes prefix + Z85(uuid) and names the file Spark would."""
    descriptor = DeletionVectorDescriptor.for_file(
        uuid=uuid, prefix=prefix, offset=1, size_in_bytes=36, cardinality=2
    )
    assert descriptor.path_or_inline_dv == prefix + z85_encode(uuid.bytes)
    name = f"deletion_vector_{uuid}.bin"
    assert descriptor.file_path() == (f"{prefix}/{name}" if prefix else name)
    assert descriptor.to_json() == {
        "storageType": "u",
        "pathOrInlineDv": descriptor.path_or_inline_dv,
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }


@pytest.mark.parametrize("prefix", ["a/b", "..", "é1", "a b"])
def test_for_file_rejects_unsafe_prefixes(prefix: str) -> None:
    """Prefixes are ASCII alphanumeric, as Spark's random prefixes are."""
    with pytest.raises(ValueError, match="alphanumeric"):
        DeletionVectorDescriptor.for_file(
            uuid=UUID(int=1), prefix=prefix, offset=1, size_in_bytes=36, cardinality=2
        )


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "must be a JSON object"),
        ({**SPEC_U, "storageType": "r"}, "unsupported storageType 'r'"),
        ({k: v for k, v in SPEC_U.items() if k != "cardinality"}, "lacks cardinality"),
        ({**SPEC_U, "sizeInBytes": None}, "lacks sizeInBytes"),
        ({**SPEC_U, "sizeInBytes": "40"}, "sizeInBytes must be an integer"),
        ({**SPEC_U, "sizeInBytes": 40.0}, "sizeInBytes must be an integer"),
        ({**SPEC_U, "cardinality": True}, "cardinality must be an integer"),
        ({**SPEC_U, "cardinality": -1}, "cardinality must be >= 0"),
        ({**SPEC_U, "offset": -1}, "offset must be >= 0"),
        ({**SPEC_U, "pathOrInlineDv": 5}, "pathOrInlineDv must be a string"),
        ({**SPEC_U, "pathOrInlineDv": "short"}, "at least 20 characters"),
        ({**SPEC_U, "pathOrInlineDv": "ab~~~~~~~~~~~~~~~~~~~~"}, "invalid Z85"),
        ({**SPEC_U, "storageType": "p", "pathOrInlineDv": ""}, "needs a path"),
    ],
)
def test_from_json_is_strict(obj: Any, message: str) -> None:
    """Bad shapes raise one ValueError that shows the offending object."""
    with pytest.raises(ValueError, match=message):
        DeletionVectorDescriptor.from_json(obj)


def test_extra_may_not_shadow_known_fields() -> None:
    """extra is for unknown fields only."""
    with pytest.raises(ValueError, match="repeats known fields"):
        DeletionVectorDescriptor("u", SPEC_U["pathOrInlineDv"], 40, 6, 4, {"offset": 3})


_Z85_CHARS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


@given(st.text(alphabet=_Z85_CHARS + "~ ", min_size=0, max_size=24))
def test_uuid_tail_matches_only_valid_values(value: str) -> None:
    """A ``u`` value ``UUID_TAIL`` matches (in bulk, with Arrow's RE2) is one the constructor
    accepts; Python's ``re`` reads the pattern alike."""
    matched = re.search(UUID_TAIL, value) is not None
    arrow = pc.match_substring_regex(pa.array([value]), UUID_TAIL)[0].as_py()
    assert matched == arrow
    if matched:
        DeletionVectorDescriptor(
            storage_type="u", path_or_inline_dv=value, size_in_bytes=1, cardinality=1
        )


@given(st.binary(min_size=16, max_size=16))
def test_uuid_tail_matches_encoded_uuids_but_the_largest_groups(data: bytes) -> None:
    """Every encoded UUID matches unless a group is led by the digits 82-84."""
    encoded = z85_encode(data)
    largest = any(encoded[i] in "%$#" for i in range(0, 20, 5))
    assert (re.search(UUID_TAIL, "ab" + encoded) is not None) == (not largest)
