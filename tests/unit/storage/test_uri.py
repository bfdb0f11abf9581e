"""TableUri parsing: s3://, s3a://, file:// and plain paths."""

from __future__ import annotations

import os

import pytest

from rlcd.errors import ConfigError
from rlcd.storage.uri import TableUri


@pytest.mark.parametrize(
    ("text", "bucket", "prefix"),
    [
        ("s3://bucket", "bucket", ""),
        ("s3://bucket/", "bucket", ""),
        ("s3://bucket/warehouse/sales", "bucket", "warehouse/sales"),
        ("s3://bucket/warehouse/sales/", "bucket", "warehouse/sales"),
        ("s3a://bucket//deep//t/", "bucket", "deep//t"),
        ("S3://bucket/t", "bucket", "t"),
        ("s3://bucket/with%20space/t", "bucket", "with space/t"),
        ("s3://bucket/t%231%3Fv", "bucket", "t#1?v"),
        ("s3n://bucket/t", "bucket", "t"),
        ("s3://my.dotted-bucket/t", "my.dotted-bucket", "t"),
    ],
)
def test_s3_uris(text: str, bucket: str, prefix: str) -> None:
    """S3 URIs give the bucket and a prefix without leading or trailing slashes."""
    uri = TableUri.parse(text)
    assert uri == TableUri("s3", bucket, prefix)
    assert uri.is_s3


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("file:///data/t", "/data/t"),
        ("file:///data/t/", "/data/t"),
        ("file://localhost/data/t", "/data/t"),
        ("file:///data/a/../t", "/data/t"),
        ("file:///data/with%20space", "/data/with space"),
        ("/data/t/", "/data/t"),
    ],
)
def test_local_uris(text: str, path: str) -> None:
    """file:// URIs and absolute paths give a normalised absolute path."""
    uri = TableUri.parse(text)
    assert uri == TableUri("file", "", path)
    assert not uri.is_s3


def test_relative_paths_are_made_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: str) -> None:
    """A relative path is resolved against the working directory when parsed."""
    monkeypatch.chdir(tmp_path)
    assert TableUri.parse("tables/t") == TableUri("file", "", os.path.join(tmp_path, "tables/t"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("s3://", "no bucket"),
        ("s3:///prefix", "no bucket"),
        ("file://remote-host/data", "must be local"),
        ("gs://bucket/t", "unsupported scheme 'gs'"),
        ("https://example.com/t", "unsupported scheme"),
        ("s3://bucket/tables/t#1", "has '\\?' or '#'"),
        ("s3://bucket/tables/t?v=1", "has '\\?' or '#'"),
        ("file:///data/t#1", "has '\\?' or '#'"),
    ],
)
def test_bad_uris_are_config_errors(text: str, message: str) -> None:
    """Unusable URIs are refused with a ConfigError that quotes the URI; so is one with a
    query or fragment, which would otherwise be dropped and name another table."""
    with pytest.raises(ConfigError, match=message):
        TableUri.parse(text)


@pytest.mark.parametrize("text", ["s3://bucket", "s3://bucket/a/b", "file:///data/t", "file:///"])
def test_str_round_trips(text: str) -> None:
    """str() gives back a URI that parses to the same value."""
    uri = TableUri.parse(text)
    assert str(uri) == text
    assert TableUri.parse(str(uri)) == uri


def test_s3a_prints_as_s3() -> None:
    """s3a:// (Hadoop's name) is the same location as s3://."""
    assert str(TableUri.parse("s3a://bucket/t")) == "s3://bucket/t"
