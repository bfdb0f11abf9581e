"""Writing to the log: one commit by put-if-absent, the commit point of the Delta protocol.

Losing the race is an outcome, not an error: :func:`write_commit` returns
:class:`~rlcd.storage.base.AlreadyExists` and the caller decides (retry, reconcile, abort).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlcd.delta.actions import Action, serialize_commit
from rlcd.delta.log_path import commit_name
from rlcd.storage.base import ObjectStore, PutResult

__all__ = ("write_commit",)


async def write_commit(store: ObjectStore, version: int, actions: Sequence[Action]) -> PutResult:
    """Create ``_delta_log/<version>.json`` unless another writer already did."""
    return await store.put_if_absent(commit_name(version), serialize_commit(actions))
