"""The structured-concurrency helpers every layer shares."""

from __future__ import annotations

import anyio
import pytest

from rlcd._tasks import gather
from rlcd.errors import NotFoundError

pytestmark = pytest.mark.anyio


async def test_gather_runs_steps_together_and_keeps_their_order() -> None:
    """Each step waits for the one after it, so only concurrent steps finish; a None step
    gives None in its place."""
    second_started = anyio.Event()

    async def first() -> str:
        with anyio.fail_after(5):
            await second_started.wait()
        return "a"

    async def second() -> str:
        second_started.set()
        return "b"

    assert await gather(first(), None, second()) == ["a", None, "b"]
    assert await gather() == []


async def test_gather_raises_the_failure_itself_and_cancels_the_rest() -> None:
    """A failing step's own error comes out, not an exception group, and the others stop."""
    stopped = []

    async def slow() -> None:
        try:
            await anyio.sleep(10)
        finally:
            stopped.append(True)

    async def failing() -> None:
        raise NotFoundError(operation="get", key="gone")

    with anyio.fail_after(5), pytest.raises(NotFoundError, match="gone"):
        await gather(slow(), failing())
    assert stopped == [True]
