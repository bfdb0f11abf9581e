"""Delta's Z85 variant (protocol notes §3.2, §3.3)."""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcd.delta.dv import z85_decode, z85_encode


def test_zeromq_reference_vector() -> None:
    """The ZeroMQ RFC 32 example encodes as specified."""
    data = bytes.fromhex("864FD26FB559F75B")
    assert z85_encode(data) == "HelloWorld"
    assert z85_decode("HelloWorld") == data


def test_spec_uuid_example() -> None:
    """The spec's ``u`` example splits into prefix ``ab`` and the documented UUID."""
    value = "ab^-aqEH.-t@S}K{vb[*k^"
    prefix, encoded = value[:-20], value[-20:]
    assert prefix == "ab"
    uuid = UUID(bytes=z85_decode(encoded))
    assert uuid == UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    assert z85_encode(uuid.bytes) == encoded


def test_unaligned_input_is_zero_padded() -> None:
    """34 bytes pad to 36 and encode to 45 characters (not 43 as Python 3.13's z85encode)."""
    data = bytes(range(1, 35))
    text = z85_encode(data)
    assert len(text) == 45
    assert z85_decode(text) == data + b"\x00\x00"


@given(st.binary(max_size=200))
def test_round_trip(data: bytes) -> None:
    """Decoding an encoding gives the input zero-padded to a multiple of 4."""
    text = z85_encode(data)
    assert len(text) == (len(data) + 3) // 4 * 5
    decoded = z85_decode(text)
    assert len(decoded) % 4 == 0
    assert decoded[: len(data)] == data
    assert not any(decoded[len(data) :])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abcd", "multiple of 5"),
        ("abcd~", "invalid Z85 character"),
        ("abc\u00e9e", "invalid Z85 character"),
        ("%nSc1", "exceeds 32 bits"),  # 85**5 - 1 > 2**32 - 1 for large leading digits
    ],
)
def test_invalid_text_is_rejected(text: str, message: str) -> None:
    """Bad lengths, characters outside the alphabet and oversized groups are ValueErrors."""
    with pytest.raises(ValueError, match=message):
        z85_decode(text)
