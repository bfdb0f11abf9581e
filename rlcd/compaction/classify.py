"""What a winning commit means for each bin of a compaction that lost the race. Pure.

The rules (design §4, with reconciliation still to come) as data: a winner that changes the
table's metadata or protocol aborts every bin; a winner that removes any source of a bin (a
DML rewrite, a DV update, another compaction: Spark's ``ConcurrentDeleteReadException``) aborts
that bin; anything else (appends, txn and domain actions, files outside the bins) lets the bin
retry at the next version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rlcd.compaction.plan import Bin
from rlcd.delta.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from rlcd.delta.replay import canonical_path

__all__ = ("Abort", "classify_winners")


@dataclass(frozen=True, slots=True)
class Abort:
    """The bin cannot commit; ``reason`` names the winning version and what it did."""

    reason: str


def _operation(actions: Sequence[Action]) -> str:
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    return info.operation if info is not None and info.operation else "unknown operation"


def classify_winners(
    bins: Iterable[Bin], winners: Sequence[tuple[int, Sequence[Action]]]
) -> Mapping[str, Abort]:
    """``bin_id -> Abort`` for every bin the winners conflict with; absent bins may retry."""
    bins = list(bins)
    owner = {canonical_path(s.path): b.bin_id for b in bins for s in b.sources}
    aborts: dict[str, Abort] = {}
    for version, actions in winners:
        what = _operation(actions)
        for action in actions:
            if isinstance(action, Metadata | Protocol):
                reason = f"version {version} ({what}) changed the table's {action.KIND}"
                return {b.bin_id: aborts.get(b.bin_id, Abort(reason)) for b in bins}
            # a remove of a source is the usual conflict; an add of a source path without its
            # remove would be an invalid DV update, caught all the same
            if isinstance(action, RemoveFile | AddFile):
                bin_id = owner.get(canonical_path(action.path))
                if bin_id is not None and bin_id not in aborts:
                    aborts[bin_id] = Abort(
                        f"version {version} ({what}) removed or changed source {action.path}"
                    )
    return aborts
