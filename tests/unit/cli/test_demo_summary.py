"""The daemon demo's per-table summary of bins, from the daemon's log events."""

from __future__ import annotations

from rlcd.cli.daemon_demo import bin_outcomes


def test_bins_by_outcome_with_positions_and_reasons() -> None:
    """Reconciled bins carry their positions, aborted ones their reasons; a loss to another
    compaction is superseded, apart from the aborts."""
    events = [
        {"event": "bin_committed", "decision": "committed"},
        {"event": "bin_committed", "decision": "committed"},
        {"event": "bin_committed", "decision": "reconciled_by_mask", "masked_positions": 250000},
        {"event": "bin_committed", "decision": "reconciled_by_remap", "remapped_positions": 3},
        {"event": "bin_aborted", "reason": "source_compacted"},
        {"event": "bin_aborted", "reason": "source_rewritten"},
        {"event": "bin_aborted", "reason": "source_rewritten"},
        {"event": "bin_failed", "error": "get k: not found"},
        {"event": "compaction_finished", "version": 9},  # not a bin: skipped
    ]
    assert bin_outcomes(events) == (
        "2 committed, 1 reconciled by remap (3 positions), "
        "1 reconciled by mask (250000 positions), 1 superseded (source_compacted), "
        "2 aborted (source_rewritten x2), 1 failed"
    )
    assert bin_outcomes([]) == "none"


def test_outcomes_asked_for_are_listed_at_zero() -> None:
    """The demo lists reconciled and aborted bins even when there were none."""
    events = [{"event": "bin_committed", "decision": "committed"}]
    shown = ("committed", "reconciled by remap", "aborted")
    assert bin_outcomes(events, always=shown) == "1 committed, 0 reconciled by remap, 0 aborted"
    assert bin_outcomes([], always=("aborted",)) == "0 aborted"
