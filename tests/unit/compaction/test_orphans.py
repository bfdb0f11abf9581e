"""The cleanup rules: which files are rlcd's, when they are old enough, what the log names."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from rlcd.compaction._orphans import (
    expired_file,
    expired_upload,
    is_own_file,
    json_references,
    log_file_format,
    referenced,
    unreferenced,
)
from rlcd.delta.dv._z85 import z85_encode
from rlcd.delta.names import data_file_name, dv_file_name
from rlcd.storage.base import ObjectMeta, PendingUpload

OURS = data_file_name("zstd", os.urandom(16))
FOREIGN = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
HOUR_MS = 3_600_000
UUID = "9583e809-abcb-472a-aae4-2d15b2385e2e"  # fixed: test ids must be the same in every run


def test_own_files_are_rlcd_named_data_and_dv_files_outside_the_log() -> None:
    """rlcd's data and DV names are its own wherever they lie, but never in _delta_log; another
    writer's names never are."""
    _, dv_name = dv_file_name(os.urandom(16))
    assert is_own_file(OURS) and is_own_file(f"p=1/q=%20x/{OURS}") and is_own_file(dv_name)
    assert not is_own_file(FOREIGN)
    assert not is_own_file(f"deletion_vector_{uuid.uuid4()}.bin")
    assert not is_own_file(f"_delta_log/{OURS}")
    assert not is_own_file(f"{OURS}.crc")


def test_only_old_enough_leftovers_expire() -> None:
    """A file or upload is a candidate from the moment it is grace_s old, not a millisecond
    before; a foreign upload never is, a backend-named temp file always may be."""
    now = 10 * HOUR_MS
    assert expired_file(ObjectMeta(OURS, 1, now - HOUR_MS), now_ms=now, grace_s=3600)
    assert not expired_file(ObjectMeta(OURS, 1, now - HOUR_MS + 1), now_ms=now, grace_s=3600)
    assert not expired_file(ObjectMeta(OURS, 1, now + HOUR_MS), now_ms=now, grace_s=0)
    assert not expired_file(ObjectMeta(FOREIGN, 1, 0), now_ms=now, grace_s=3600)
    assert expired_upload(PendingUpload(f"p=1/{OURS}", "u", 0), now_ms=now, grace_s=3600)
    assert not expired_upload(PendingUpload(FOREIGN, "u", 0), now_ms=now, grace_s=3600)
    assert expired_upload(
        PendingUpload("_delta_log/00000000000000000003.json", "t", 0, rlcd_named=True),
        now_ms=now,
        grace_s=3600,
    )
    assert not expired_upload(PendingUpload(OURS, "u", now - 10), now_ms=now, grace_s=3600)


@pytest.mark.parametrize(
    ("key", "fmt"),
    [
        ("_delta_log/00000000000000000003.json", "json"),
        ("_delta_log/00000000000000000001.00000000000000000003.compacted.json", "json"),
        ("_delta_log/00000000000000000003.checkpoint.parquet", "parquet"),
        ("_delta_log/00000000000000000003.checkpoint.0000000001.0000000002.parquet", "parquet"),
        (f"_delta_log/00000000000000000003.checkpoint.{UUID}.json", "json"),
        (f"_delta_log/00000000000000000003.checkpoint.{UUID}.parquet", "parquet"),
        (f"_delta_log/_sidecars/00000000000000000003.checkpoint.{UUID}.parquet", "parquet"),
        (f"_delta_log/_staged_commits/00000000000000000004.{UUID}.json", "json"),
        ("_delta_log/00000000000000000003.crc", None),
        ("_delta_log/_last_checkpoint", None),
        ("_delta_log/.00000000000000000003.json.tmp", None),
        ("_delta_log/_sidecars/.x.parquet.crc", None),
        ("p=1/00000000000000000003.json", None),
    ],
)
def test_which_log_files_can_name_data_files(key: str, fmt: str | None) -> None:
    """Commits, log compactions, every checkpoint form, sidecars and staged commits are read;
    checksums, hints and other writers' temp files are not."""
    assert log_file_format(key) == fmt


def test_json_references_cover_adds_removes_cdc_and_dvs() -> None:
    """Every add, remove and cdc path of a JSON log file counts, with its DV; other actions
    and blank lines are ignored; a line that is not JSON is an error, not a silent skip."""
    dv = {"storageType": "u", "pathOrInlineDv": "ab" + z85_encode(bytes(16)), "sizeInBytes": 1}
    lines = [
        {"commitInfo": {"operation": "WRITE"}},
        {"add": {"path": "a.parquet", "size": 1, "deletionVector": dv}},
        {"remove": {"path": "b.parquet"}},
        {"cdc": {"path": "_change_data/c.parquet"}},
        {"metaData": {"id": "x"}},
    ]
    data = ("\n".join(json.dumps(line) for line in lines) + "\n\n").encode()
    assert list(json_references(data)) == [
        ("a.parquet", dv),
        ("b.parquet", None),
        ("_change_data/c.parquet", None),
    ]
    with pytest.raises(ValueError, match=r"Expecting value|Unterminated|delimiter"):
        list(json_references(b'{"add": {"path": "a"}}\n{"add": '))


def test_references_protect_by_key_and_by_name_in_any_path_form() -> None:
    """A file is referenced by a relative URI-encoded path, an absolute path under the root in
    another scheme, a path elsewhere carrying its name, or as a DV file (u or p); the rest of
    rlcd's files are orphans."""
    root = "s3://bucket/t"
    names = [data_file_name("zstd", os.urandom(16)) for _ in range(5)]
    dv_u, dv_u_name = dv_file_name(os.urandom(16))
    _, dv_p_name = dv_file_name(os.urandom(16))
    refs = referenced(
        root,
        [
            (f"d=2026-01-01%2000%3A00/{names[0]}", None),
            (f"s3a://bucket/t/p=1/{names[1]}", None),
            (f"s3://elsewhere/other/{names[2]}", None),
            (
                "x.parquet",
                {
                    "storageType": "u",
                    "pathOrInlineDv": "ab" + z85_encode(dv_u.bytes),
                    "sizeInBytes": 1,
                    "cardinality": 1,
                },
            ),
            (
                "y.parquet",
                {
                    "storageType": "p",
                    "pathOrInlineDv": f"s3://bucket/t/{dv_p_name}",
                    "sizeInBytes": 1,
                    "cardinality": 1,
                },
            ),
        ],
    )
    assert f"d=2026-01-01 00:00/{names[0]}" in refs.keys
    assert f"ab/{dv_u_name}" in refs.keys
    listing = [
        ObjectMeta(f"d=2026-01-01 00:00/{names[0]}", 1, 0),
        ObjectMeta(f"p=1/{names[1]}", 1, 0),
        ObjectMeta(f"p=9/{names[2]}", 1, 0),
        ObjectMeta(f"ab/{dv_u_name}", 1, 0),
        ObjectMeta(dv_p_name, 1, 0),
        ObjectMeta(f"p=1/{names[3]}", 1, 0),
        ObjectMeta(names[4], 1, 0),
    ]
    assert [m.key for m in unreferenced(listing, refs)] == [f"p=1/{names[3]}", names[4]]


def test_a_malformed_dv_reference_is_doubt() -> None:
    """A DV descriptor that cannot be parsed raises, so the caller removes nothing."""
    with pytest.raises(ValueError, match="lacks"):
        referenced("s3://b/t", [("a.parquet", {"storageType": "u"})])
