"""The backoff schedule (pure) and the retry loop around a scripted attempt."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcd.errors import (
    ConfigError,
    NotFoundError,
    RetriesExhaustedError,
    StorageError,
    TransientStorageError,
)
from rlcd.storage.retry import RetryPolicy, backoff_ceiling, backoff_delay, retrying

policies = st.builds(
    lambda base, extra, attempts: RetryPolicy(attempts, base, base + extra),
    st.floats(0, 5),
    st.floats(0, 60),
    st.integers(1, 20),
)
retries = st.integers(0, 10_000)
draws = st.floats(0, 1, exclude_max=True)


@given(policies, retries, draws)
def test_delay_is_bounded_by_the_ceiling_and_the_cap(
    policy: RetryPolicy, retry: int, draw: float
) -> None:
    """Every wait lies in [0, ceiling] and the ceiling never exceeds the cap."""
    delay = backoff_delay(policy, retry, draw)
    assert 0 <= delay <= backoff_ceiling(policy, retry) <= policy.cap_s


@given(policies, retries)
def test_ceiling_doubles_until_the_cap(policy: RetryPolicy, retry: int) -> None:
    """The ceiling never shrinks: it doubles from base until it reaches the cap, then stays."""
    now, later = backoff_ceiling(policy, retry), backoff_ceiling(policy, retry + 1)
    assert now <= later
    assert later == min(policy.cap_s, 2 * now) or now == policy.cap_s


def test_schedule_values() -> None:
    """The first waits are base, 2*base, 4*base... scaled by the draw, capped."""
    policy = RetryPolicy(max_attempts=10, base_s=0.1, cap_s=0.5)
    assert [backoff_ceiling(policy, n) for n in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert backoff_delay(policy, 2, 0.5) == pytest.approx(0.2)
    assert backoff_delay(policy, 2, 0.0) == 0.0


@given(policies, retries, draws, draws)
def test_delay_follows_the_draw(policy: RetryPolicy, retry: int, a: float, b: float) -> None:
    """The jitter is the draw: a larger draw never waits less."""
    low, high = sorted((a, b))
    assert backoff_delay(policy, retry, low) <= backoff_delay(policy, retry, high)


@pytest.mark.parametrize(
    ("attempts", "base", "cap"), [(0, 0.1, 1.0), (3, -0.1, 1.0), (3, 2.0, 1.0)]
)
def test_policy_is_validated(attempts: int, base: float, cap: float) -> None:
    """Impossible policies are refused when built, naming the setting."""
    with pytest.raises(ConfigError, match="retry"):
        RetryPolicy(attempts, base, cap)


INSTANT = RetryPolicy(max_attempts=3, base_s=0.0, cap_s=0.0)


class Script:
    """An attempt that raises the given errors in turn, then returns "done"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def transient(n: int) -> TransientStorageError:
    return TransientStorageError(f"SlowDown #{n}", operation="get", key="k")


@pytest.mark.anyio
async def test_transient_failures_are_retried() -> None:
    """Transient failures are retried until an attempt succeeds."""
    script = Script(transient(1), transient(2))
    assert await retrying(INSTANT, "get", "k", script) == "done"
    assert script.calls == 3


@pytest.mark.anyio
async def test_exhaustion_names_operation_key_and_last_cause() -> None:
    """After max_attempts transient failures the error names the call and chains the last."""
    script = Script(transient(1), transient(2), transient(3), transient(4))
    with pytest.raises(RetriesExhaustedError) as info:
        await retrying(INSTANT, "get", "k", script)
    assert str(info.value) == "get k: gave up after 3 attempts: SlowDown #3"
    assert (info.value.operation, info.value.key, info.value.attempts) == ("get", "k", 3)
    assert isinstance(info.value.__cause__, TransientStorageError)
    assert script.calls == 3


@pytest.mark.anyio
@pytest.mark.parametrize(
    "error",
    [
        NotFoundError(operation="get", key="k"),
        StorageError("AccessDenied (HTTP 403)", operation="get", key="k"),
        RetriesExhaustedError("inner", operation="get", key="k", attempts=3),
    ],
)
async def test_other_failures_pass_through_at_once(error: StorageError) -> None:
    """Permanent errors, and retries already exhausted below, are not retried."""
    script = Script(error)
    with pytest.raises(type(error)) as info:
        await retrying(INSTANT, "get", "k", script)
    assert info.value is error
    assert script.calls == 1


@pytest.mark.anyio
async def test_waits_follow_the_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop sleeps backoff_delay(policy, n, draw) before retry n."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr("rlcd.storage.retry.anyio.sleep", sleep)
    policy = RetryPolicy(max_attempts=4, base_s=1.0, cap_s=3.0)
    script = Script(transient(1), transient(2), transient(3))
    assert await retrying(policy, "get", "k", script, draw=lambda: 0.5) == "done"
    assert slept == [0.5, 1.0, 1.5]
