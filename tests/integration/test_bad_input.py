"""Bad table content gives a clear error naming table, version and file, and writes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rlcd.delta.load import load_snapshot, read_deletion_vector
from rlcd.errors import CorruptLogError, DeletionVectorError, UnsupportedFeatureError
from rlcd.storage import LocalStore

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def _load_dvs(path: Path) -> None:
    async with LocalStore(path) as store:
        snap = await load_snapshot(store)
        for add in snap.files.values():
            await read_deletion_vector(store, add, version=snap.version)


async def test_malformed_commit_line(copy_fixture: Callable[[str], Path]) -> None:
    """A commit line that is not JSON names the table, version, file and line."""
    path = copy_fixture("basic-dv-no-checkpoint")
    commit = path / "_delta_log" / "00000000000000000001.json"
    commit.write_bytes(commit.read_bytes() + b'{"add": {"path": "x", "size": \n')
    before = _tree(path)
    with pytest.raises(CorruptLogError) as info:
        await _load_dvs(path)
    text = str(info.value)
    assert "malformed commit: line 4" in text
    assert f"table {path.as_uri()}" in text and "version 1" in text
    assert "file _delta_log/00000000000000000001.json" in text
    assert _tree(path) == before


async def test_truncated_checkpoint(copy_fixture: Callable[[str], Path]) -> None:
    """A checkpoint cut short is reported with its version and file name."""
    path = copy_fixture("basic-dv-with-checkpoint")
    cp = max((path / "_delta_log").glob("*.checkpoint.parquet"))
    cp.write_bytes(cp.read_bytes()[:-100])
    before = _tree(path)
    with pytest.raises(CorruptLogError, match="unreadable checkpoint") as info:
        await _load_dvs(path)
    assert info.value.version == int(cp.name.split(".")[0])
    assert info.value.path == f"_delta_log/{cp.name}"
    assert _tree(path) == before


async def test_missing_dv_file(copy_fixture: Callable[[str], Path]) -> None:
    """A DV file that is gone is a DeletionVectorError naming the data file and DV file."""
    path = copy_fixture("krs-table-with-dv-small")
    (dv,) = path.glob("deletion_vector_*.bin")
    dv.unlink()
    with pytest.raises(DeletionVectorError, match=f"{dv.name} is missing") as info:
        await _load_dvs(path)
    assert info.value.path is not None and info.value.path.endswith(".parquet")
    assert info.value.version == 1


async def test_dv_crc_mismatch(copy_fixture: Callable[[str], Path]) -> None:
    """A flipped byte in a DV fails its CRC-32 with a message naming table, file and DV."""
    path = copy_fixture("krs-table-with-dv-small")
    (dv,) = path.glob("deletion_vector_*.bin")
    data = bytearray(dv.read_bytes())
    data[-5] ^= 0xFF  # last byte of the bitmap, just before the CRC
    dv.write_bytes(bytes(data))
    with pytest.raises(DeletionVectorError, match="CRC-32 mismatch") as info:
        await _load_dvs(path)
    assert path.as_uri() in str(info.value) and info.value.version == 1


async def test_unknown_reader_feature(copy_fixture: Callable[[str], Path]) -> None:
    """A reader feature rlcd does not know is refused by name."""
    path = copy_fixture("krs-table-with-dv-small")
    commit = path / "_delta_log" / "00000000000000000002.json"
    commit.write_text(
        json.dumps(
            {
                "protocol": {
                    "minReaderVersion": 3,
                    "minWriterVersion": 7,
                    "readerFeatures": ["deletionVectors", "futureMagic"],
                    "writerFeatures": ["deletionVectors", "futureMagic"],
                }
            }
        )
        + "\n"
    )
    before = _tree(path)
    with pytest.raises(UnsupportedFeatureError, match="futureMagic") as info:
        await _load_dvs(path)
    assert info.value.features == ("futureMagic",)
    assert path.as_uri() in str(info.value)
    assert _tree(path) == before
