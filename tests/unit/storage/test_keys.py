"""The key, prefix and range rules both backends share."""

from __future__ import annotations

import pytest

from rlcd.errors import StorageError
from rlcd.storage._keys import check_key, check_prefix, check_range


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "_delta_log/00000000000000000000.json",
        "p=1/part-0.parquet",
        "é x%20",
        ".hidden",
        "a..b",
    ],
)
def test_good_keys(key: str) -> None:
    assert check_key("get", key) == key


@pytest.mark.parametrize(
    "key", ["", "/a", "a/", "a//b", ".", "..", "../a", "a/../b", "a/./b", "a\0b"]
)
def test_bad_keys_name_operation_and_key(key: str) -> None:
    """A key that could escape the root or collapse to another key is refused."""
    with pytest.raises(StorageError, match="invalid key") as info:
        check_key("put", key)
    assert (info.value.operation, info.value.key) == ("put", key)


@pytest.mark.parametrize(
    "prefix", ["", "_delta_log/", "_delta_log/0000", "a/b", ".", "a/.", "a/.."]
)
def test_good_prefixes(prefix: str) -> None:
    """The last segment may be partial, empty, or start with dots."""
    assert check_prefix("list", prefix) == prefix


@pytest.mark.parametrize("prefix", ["/", "/a", "a//b", "../", "a/../b", "./a", "\0"])
def test_bad_prefixes(prefix: str) -> None:
    with pytest.raises(StorageError, match="invalid prefix"):
        check_prefix("list", prefix)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (None, None, (0, None)),
        (3, None, (3, None)),
        (None, 4, (0, 4)),
        (2, 2, (2, 2)),
        (1, 9, (1, 9)),
    ],
)
def test_good_ranges(start: int | None, end: int | None, expected: tuple[int, int | None]) -> None:
    assert check_range("get", "k", start, end) == expected


@pytest.mark.parametrize(("start", "end"), [(-1, None), (None, -1), (5, 4)])
def test_bad_ranges(start: int | None, end: int | None) -> None:
    with pytest.raises(StorageError, match=r"get k: invalid range"):
        check_range("get", "k", start, end)
