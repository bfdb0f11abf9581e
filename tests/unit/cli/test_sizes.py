"""Size flags read MB as 10^6 and MiB as 2^20, and refuse the spelling that could be either."""

from __future__ import annotations

import pytest

from rlcd.cli.sizes import parse_size_flag
from rlcd.compaction.policy import parse_byte_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1048576", 1 << 20),
        ("512b", 512),
        ("1MB", 10**6),
        ("1mb", 10**6),
        ("1MiB", 1 << 20),
        ("128 MiB", 128 << 20),
        ("2GB", 2 * 10**9),
        ("2gib", 2 << 30),
        ("4kB", 4000),
        ("4KiB", 4096),
    ],
)
def test_units_have_their_real_meaning(text: str, size: int) -> None:
    """Decimal units are powers of 1000, binary units powers of 1024."""
    assert parse_size_flag(text) == size


@pytest.mark.parametrize("text", ["1m", "128M", "1g", "4k"])
def test_a_bare_prefix_is_refused_with_both_spellings(text: str) -> None:
    """`128m` could mean MB or MiB: refused, and the message offers both."""
    with pytest.raises(ValueError, match="ambiguous") as info:
        parse_size_flag(text)
    assert "iB" in str(info.value) and "B (powers of 1000)" in str(info.value)


@pytest.mark.parametrize("text", ["", "lots", "1.5MB", "-1MB", "0", "1XB", f"{2**63}"])
def test_anything_else_is_refused(text: str) -> None:
    """Fractions, signs, unknown units, zero and sizes past a Delta long are not sizes."""
    with pytest.raises(ValueError, match=r"not a size|out of range"):
        parse_size_flag(text)


def test_table_properties_keep_sparks_meaning() -> None:
    """delta.targetFileSize values are still read as Spark reads them: every unit binary."""
    assert parse_byte_size("1mb") == parse_byte_size("1m") == 1 << 20
