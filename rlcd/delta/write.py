"""Writing to the log: commitInfo construction and the put-if-absent commit point.

Losing the race is an outcome, not an error: :func:`write_commit` returns
:class:`~rlcd.storage.base.AlreadyExists` and the caller decides (retry, reconcile, abort).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlcd import __version__
from rlcd.delta.actions import Action, CommitInfo, serialize_commit
from rlcd.delta.log_path import commit_name
from rlcd.storage.base import ObjectStore, PutResult

__all__ = ("ENGINE_INFO", "make_commit_info", "write_commit")

ENGINE_INFO = f"rlcd/{__version__}"


def make_commit_info(
    *,
    operation: str,
    parameters: Mapping[str, Any],
    read_version: int,
    previous_ict: int | None,
    isolation_level: str,
    is_blind_append: bool,
    metrics: Mapping[str, int],
    txn_id: str,
    now_ms: int,
    in_commit_timestamps: bool,
) -> CommitInfo:
    """A Spark-shaped commitInfo (delta-protocol.md §2.5, §2.13).

    With in-commit timestamps the commit carries ``max(now, previous ICT + 1)`` (§5.4), where
    ``previous_ict`` is that of the version before the one being attempted: the caller rebuilds
    the commitInfo on every retry.
    """
    ict = None
    if in_commit_timestamps:
        ict = now_ms if previous_ict is None else max(now_ms, previous_ict + 1)
    return CommitInfo(
        timestamp=now_ms if ict is None else ict,
        in_commit_timestamp=ict,
        operation=operation,
        txn_id=txn_id,
        extra={
            "operationParameters": dict(parameters),
            "readVersion": read_version,
            "isolationLevel": isolation_level,
            "isBlindAppend": is_blind_append,
            "operationMetrics": {k: str(v) for k, v in metrics.items()},
            "engineInfo": ENGINE_INFO,
        },
    )


async def write_commit(store: ObjectStore, version: int, actions: Sequence[Action]) -> PutResult:
    """Create ``_delta_log/<version>.json`` unless another writer already did.

    ``commitInfo`` must come first (mandatory with in-commit timestamps, §5.4).
    """
    return await store.put_if_absent(commit_name(version), serialize_commit(actions))
