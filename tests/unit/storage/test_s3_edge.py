"""The S3 error edge (botocore and aiohttp exceptions to rlcd errors) and S3Config checks.

moto and the fault proxy prove the mapping end to end (tests/contract); this pins the table.
"""

from __future__ import annotations

import ssl

import aiohttp
import pytest
from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
    SSLError,
)
from botocore.utils import parse_timestamp  # type: ignore[import-untyped]

from rlcd.errors import ConfigError, NotFoundError, StorageError, TransientStorageError
from rlcd.storage import RetryPolicy, S3Config
from rlcd.storage.s3 import _timestamp, _translate


def client_error(code: str, status: int, message: str = "") -> ClientError:
    response = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "GetObject")


def translated(error: BaseException) -> StorageError:
    with pytest.raises(StorageError) as info, _translate("get", "dir/k"):
        raise error
    assert (info.value.operation, info.value.key) == ("get", "dir/k")
    assert info.value.__cause__ is error
    return info.value


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("SlowDown", 503),
        ("Throttling", 400),
        ("ThrottlingException", 400),
        ("RequestLimitExceeded", 400),
        ("TooManyRequestsException", 429),
        ("", 429),
        ("InternalError", 500),
        ("InternalError", 200),  # CompleteMultipartUpload's error inside a 200
        ("ServiceUnavailable", 503),
        ("", 502),
        ("", 504),
        ("RequestTimeout", 400),
        ("ConditionalRequestConflict", 409),
        ("OperationAborted", 409),
    ],
)
def test_throttling_and_server_errors_are_transient(code: str, status: int) -> None:
    assert isinstance(translated(client_error(code, status)), TransientStorageError)


@pytest.mark.parametrize(
    ("code", "status"), [("NoSuchKey", 404), ("404", 404), ("NoSuchUpload", 404)]
)
def test_missing_objects_are_not_found(code: str, status: int) -> None:
    assert isinstance(translated(client_error(code, status)), NotFoundError)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("AccessDenied", 403),
        ("InvalidAccessKeyId", 403),
        ("NoSuchBucket", 404),
        ("InvalidArgument", 400),
        ("EntityTooSmall", 400),
        ("MethodNotAllowed", 405),
    ],
)
def test_other_client_errors_are_final(code: str, status: int) -> None:
    error = translated(client_error(code, status, "details"))
    assert not isinstance(error, TransientStorageError | NotFoundError)
    assert str(error) == f"get dir/k: {code} (HTTP {status}): details"


@pytest.mark.parametrize(
    "error",
    [
        ReadTimeoutError(endpoint_url="http://s3"),
        ConnectTimeoutError(endpoint_url="http://s3"),
        EndpointConnectionError(endpoint_url="http://s3"),
        ResponseStreamingError(error="connection reset"),
        aiohttp.ClientPayloadError("truncated"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError(),
        ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
    ],
)
def test_connection_failures_are_transient(error: Exception) -> None:
    assert isinstance(translated(error), TransientStorageError)


def test_certificate_problems_are_final() -> None:
    error = SSLError(endpoint_url="http://s3", error="bad certificate")
    assert not isinstance(translated(error), TransientStorageError)


def test_missing_credentials_are_a_configuration_error() -> None:
    """Nothing to retry, nothing wrong with the store: the AWS setup is missing, named."""
    error = NoCredentialsError()
    with (
        pytest.raises(ConfigError, match=r"get dir/k: .*AWS_PROFILE") as info,
        _translate("get", "dir/k"),
    ):
        raise error
    assert info.value.__cause__ is error


def test_unrelated_exceptions_pass_through() -> None:
    """Bugs are not disguised as storage errors."""
    with pytest.raises(KeyError), _translate("get", "k"):
        raise KeyError("x")


def test_config_repr_hides_secrets() -> None:
    config = S3Config(access_key_id="AKIAEXAMPLE", secret_access_key="s3cr3t", session_token="tok")
    assert "s3cr3t" not in repr(config)
    assert "tok" not in repr(config)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"access_key_id": "a"}, "go together"),
        ({"secret_access_key": "s"}, "go together"),
        ({"session_token": "t"}, "session_token"),
        ({"addressing_style": "sideways"}, "addressing_style"),
        ({"read_timeout_s": 0}, "timeouts"),
        ({"max_connections": 0}, "max_connections"),
        ({"part_size": 1024}, "part_size"),
        ({"list_page_size": 1001}, "list_page_size"),
    ],
)
def test_config_is_validated(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        S3Config(**settings)  # type: ignore[arg-type]


def test_config_defaults_defer_to_botocore() -> None:
    """Nothing that botocore resolves from the environment has a default of ours."""
    config = S3Config()
    assert (config.endpoint_url, config.region, config.profile) == (None, None, None)
    assert (config.access_key_id, config.addressing_style) == (None, None)
    assert config.retry == RetryPolicy()


@pytest.mark.parametrize(
    "value",
    [
        "Sat, 05 Dec 2026 12:36:50 GMT",  # Last-Modified, an HTTP date
        "Thu, 29 Feb 2024 00:00:01 GMT",
        "2026-12-03T17:22:38.000Z",  # S3's XML bodies
        "2026-12-03T17:22:38+01:00",
        "1764955010",  # epoch seconds
    ],
)
def test_timestamps_parse_as_botocore_parses_them(value: str) -> None:
    """The cheap parsers give botocore's answer, an aware datetime, for each form S3 sends."""
    parsed = _timestamp(value)
    assert parsed.tzinfo is not None
    assert parsed == parse_timestamp(value)
