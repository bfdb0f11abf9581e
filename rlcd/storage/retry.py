"""Retries of transient storage failures: a pure backoff schedule and the async loop using it.

Which failures are transient is the backend's call: it raises
:class:`~rlcd.errors.TransientStorageError` for throttling, 5xx, resets and timeouts, and
anything else passes straight through. The loop owns no botocore knowledge.

The schedule is AWS's "full jitter" (also botocore's standard mode): before retry ``n`` wait a
uniform draw below ``min(cap, base * 2**n)``. Spreading retries over the whole window keeps many
clients throttled at once from coming back in lockstep.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
import structlog

from rlcd.errors import ConfigError, RetriesExhaustedError, TransientStorageError

__all__ = ("RetryPolicy", "backoff_ceiling", "backoff_delay", "retrying")

_T = TypeVar("_T")

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry one storage call.

    Invariants: ``max_attempts >= 1`` (1 means no retry); ``0 <= base_s <= cap_s``.
    The defaults wait at most about 25 s in total before giving up.
    """

    max_attempts: int = 8
    base_s: float = 0.1
    cap_s: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"retry max_attempts must be >= 1, got {self.max_attempts}")
        if not 0 <= self.base_s <= self.cap_s:
            raise ConfigError(
                f"retry delays need 0 <= base_s <= cap_s, got {self.base_s} and {self.cap_s}"
            )


def backoff_ceiling(policy: RetryPolicy, retry: int) -> float:
    """The longest wait before retry number ``retry`` (0-based): non-decreasing, at most cap."""
    try:
        return min(policy.cap_s, math.ldexp(policy.base_s, retry))  # base * 2**retry
    except OverflowError:
        return policy.cap_s


def backoff_delay(policy: RetryPolicy, retry: int, draw: float) -> float:
    """The wait before retry number ``retry``, given a uniform ``draw`` in ``[0, 1)``."""
    return backoff_ceiling(policy, retry) * draw


async def retrying(
    policy: RetryPolicy,
    operation: str,
    key: str,
    attempt: Callable[[], Awaitable[_T]],
    *,
    draw: Callable[[], float] = random.random,
) -> _T:
    """Await ``attempt()`` until it returns, retrying transient failures with backoff.

    Returns:
        What the first successful attempt returned.

    Raises:
        RetriesExhaustedError: every one of ``policy.max_attempts`` attempts failed transiently;
            it names ``operation`` and ``key`` and chains the last failure.
        StorageError: any non-transient failure, at once.
    """
    failures = 0
    while True:
        try:
            return await attempt()
        except RetriesExhaustedError:
            raise  # already retried below us: retrying again would multiply the waits
        except TransientStorageError as exc:
            failures += 1
            if failures == policy.max_attempts:
                detail = str(exc).removeprefix(f"{exc.operation} {exc.key}: ")
                raise RetriesExhaustedError(
                    detail, operation=operation, key=key, attempts=failures
                ) from exc
            delay = backoff_delay(policy, failures - 1, draw())
            _log.info(
                "storage_retry",
                operation=operation,
                key=key,
                attempt=failures,
                delay_s=round(delay, 3),
                error=str(exc),
            )
            await anyio.sleep(delay)
