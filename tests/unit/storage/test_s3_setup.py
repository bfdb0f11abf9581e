"""How an S3 client is set up: botocore's models parsed once, into plain dicts, before the client
is made; S3's timestamps parsed without dateutil. No server: making a client sends nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import botocore  # type: ignore[import-untyped]
import pytest
from botocore.loaders import JSONFileLoader, Loader  # type: ignore[import-untyped]

from rlcd.storage import S3Config
from rlcd.storage import s3 as s3_module
from rlcd.storage.s3 import S3Client, _JsonFiles, _load_models, _timestamp

DATA = Path(botocore.__file__).parent / "data"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-03T17:22:38.000Z", datetime(2026, 12, 3, 17, 22, 38, tzinfo=UTC)),
        ("2026-12-03T17:22:38.125Z", datetime(2026, 12, 3, 17, 22, 38, 125000, tzinfo=UTC)),
        ("2026-12-03T17:22:38Z", datetime(2026, 12, 3, 17, 22, 38, tzinfo=UTC)),
        (
            "2026-12-03T19:22:38+02:00",
            datetime(2026, 12, 3, 19, 22, 38, tzinfo=timezone(timedelta(hours=2))),
        ),
        ("2026-12-03T17:22:38", datetime(2026, 12, 3, 17, 22, 38, tzinfo=UTC)),  # no zone: UTC
        ("Thu, 03 Dec 2026 17:22:38 GMT", datetime(2026, 12, 3, 17, 22, 38, tzinfo=UTC)),
        ("1796318558", datetime(2026, 12, 3, 17, 22, 38, tzinfo=UTC)),  # epoch seconds
        (1796318558, datetime(2026, 12, 3, 17, 22, 38, tzinfo=UTC)),  # from a JSON protocol
    ],
)
def test_timestamps_are_aware_and_exact(text: str | int, expected: datetime) -> None:
    parsed = _timestamp(text)
    assert parsed.tzinfo is not None
    assert parsed == expected


@pytest.mark.parametrize(
    "name", ["endpoints", "partitions", "s3/2006-03-01/service-2", "sts/2011-06-15/service-2"]
)
def test_models_parse_to_what_botocore_parses_in_the_same_order(name: str) -> None:
    ours, theirs = (
        _JsonFiles().load_file(str(DATA / name)),
        JSONFileLoader().load_file(str(DATA / name)),
    )
    assert ours == theirs
    assert json.dumps(ours) == json.dumps(theirs)  # same keys in the same order, all the way down
    assert _JsonFiles().load_file(str(DATA / "no-such-model")) is None


@pytest.mark.anyio
async def test_making_a_client_parses_no_model_once_they_are_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What botocore reads to make an S3 client is what ``_load_models`` loaded (in a thread),
    so nothing is parsed in the event loop; other services' models (STS, SSO for credentials)
    still load on demand."""
    loader = Loader(file_loader=_JsonFiles())
    _load_models(loader)
    parsed: list[str] = []
    load_file = _JsonFiles.load_file

    def counting(self: _JsonFiles, file_path: str) -> object:
        parsed.append(file_path)
        return load_file(self, file_path)

    monkeypatch.setattr(_JsonFiles, "load_file", counting)
    monkeypatch.setattr(s3_module, "_loader", lambda _data_path: loader)
    monkeypatch.setattr(s3_module, "_load_models", lambda _models: None)
    config = S3Config(
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        access_key_id="AKIDEXAMPLE",
        secret_access_key="secret",
    )
    async with S3Client(config):
        pass
    assert parsed == []
    assert loader.load_service_model("sts", "service-2")["metadata"]["serviceId"] == "STS"
    assert parsed
