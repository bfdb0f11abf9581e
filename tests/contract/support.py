"""Helpers shared by the contract tests: moto settings, a boto3 client, the Backend record."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlcd.storage import MIN_PART_SIZE, ObjectStore, RetryPolicy, S3Config

FAST_RETRY = RetryPolicy(max_attempts=3, base_s=0.001, cap_s=0.005)


def moto_config(endpoint: str, **overrides: Any) -> S3Config:
    """Settings for the moto server: path addressing, small parts and pages, quick retries."""
    settings: dict[str, Any] = {
        "endpoint_url": endpoint,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "addressing_style": "path",
        "part_size": MIN_PART_SIZE,
        "list_page_size": 7,
        "retry": FAST_RETRY,
    }
    settings.update(overrides)
    return S3Config(**settings)


@functools.cache
def boto_client(endpoint: str) -> Any:
    """A plain boto3 client, for looking behind the store's back."""
    import boto3  # type: ignore[import-untyped]

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@dataclass
class Backend:
    """A store under test, and a way to see what a failed write left behind."""

    name: str
    store: ObjectStore
    leftovers: Callable[[], list[str]]
    """Temp files or incomplete multipart uploads that a finished writer must not leave."""
