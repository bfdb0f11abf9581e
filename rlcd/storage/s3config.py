"""How to reach S3: the settings of an :class:`~rlcd.storage.s3.S3Client`, in a module of their
own so that a command can build them (and a local table can ignore them) without importing
aiobotocore and aiohttp."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlcd.errors import ConfigError
from rlcd.storage.base import MAX_PART_SIZE, MIN_PART_SIZE
from rlcd.storage.retry import RetryPolicy

__all__ = ("S3Config", "AddressingStyle")

AddressingStyle = Literal["auto", "virtual", "path"]

"""S3's largest part."""


@dataclass(frozen=True, slots=True)
class S3Config:
    """How to reach S3 or an S3-compatible store (MinIO, R2, moto).

    Fields left ``None`` defer to botocore's credential chain and environment (see
    :mod:`rlcd.storage.s3`). ``addressing_style="path"`` suits MinIO and moto; R2 wants
    ``region="auto"``. Credentials never appear in the ``repr``.
    """

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    addressing_style: AddressingStyle | None = None
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    max_connections: int = 10
    # S3's smallest part: each bin holds one part on its way, so a small part keeps the peak
    # low at the same throughput; at most 10,000 parts: 48 GiB
    part_size: int = MIN_PART_SIZE
    list_page_size: int = 1000
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ConfigError("s3: access_key_id and secret_access_key go together")
        if self.session_token is not None and self.access_key_id is None:
            raise ConfigError("s3: session_token needs access_key_id and secret_access_key")
        if self.addressing_style not in {None, "auto", "virtual", "path"}:
            raise ConfigError(
                f"s3: addressing_style {self.addressing_style!r} is not one of auto, virtual, path"
            )
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ConfigError("s3: timeouts must be positive")
        if self.max_connections < 1:
            raise ConfigError("s3: max_connections must be at least 1")
        if not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise ConfigError(f"s3: part_size must be within [{MIN_PART_SIZE}, {MAX_PART_SIZE}]")
        if not 1 <= self.list_page_size <= 1000:
            raise ConfigError("s3: list_page_size must be within [1, 1000]")
