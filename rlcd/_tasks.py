"""Small helpers for structured concurrency shared by every layer (a leaf module)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import anyio

__all__ = ("primary_error", "gather")


async def gather(*steps: Awaitable[Any] | None) -> list[Any]:
    """Await ``steps`` concurrently (a ``None`` step gives ``None``) and return their results in
    order: independent requests go out together rather than one round trip after another. A
    failure cancels the other steps and is raised as itself (see :func:`primary_error`), not
    inside an exception group."""
    results: list[Any] = [None] * len(steps)

    async def run(i: int, step: Awaitable[Any]) -> None:
        results[i] = await step

    try:
        async with anyio.create_task_group() as tg:
            for i, step in enumerate(steps):
                if step is not None:
                    tg.start_soon(run, i, step)
    except BaseExceptionGroup as group:
        raise primary_error(group)  # noqa: B904 (the leaf keeps its own cause)
    return results


def primary_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The exception a caller should see for a failed task group: its first leaf that is not a
    cancellation (a failure cancels its siblings, whose cancellations are only noise)."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    cancelled = anyio.get_cancelled_exc_class()
    return next((e for e in leaves if not isinstance(e, cancelled)), leaves[0])
