"""Small helpers for structured concurrency shared by every layer (a leaf module)."""

from __future__ import annotations

import anyio

__all__ = ("primary_error",)


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
