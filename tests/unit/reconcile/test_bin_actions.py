"""Forward reconcile of one bin (design §4): remaps, masks, several winners, the actions built."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from pyroaring import BitMap64

from rlcd.compaction.plan import Bin
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.rewrite import RewrittenBin
from rlcd.delta.actions import AddFile, RemoveFile
from rlcd.delta.dv import DeletionVectorDescriptor, decode_inline_dv
from rlcd.delta.outcome import Abort
from rlcd.errors import ConfigError
from rlcd.reconcile.bin_actions import (
    BinState,
    Fate,
    apply_steps,
    bin_actions,
    initial_state,
    loose_stats,
)
from rlcd.reconcile.classify import Mask, Remap
from rlcd.reconcile.counter import Run
from rlcd.reconcile.tags import COMPACTED_INTO, composition_tags


def _add(path: str, rows: int, *deleted: int) -> AddFile:
    dv = DeletionVectorDescriptor.inline(BitMap64(deleted)) if deleted else None
    return AddFile(path=path, size=100, stats=json.dumps({"numRecords": rows}), deletion_vector=dv)


# sources: s0 10 rows (none deleted), s1 10 rows with {0, 5} deleted at read time, s2 4 rows
S0, S1, S2 = _add("s0", 10), _add("s1", 10, 0, 5), _add("s2", 4)
RUN_S1 = composition_tags("out", 10, 10)
STATS = '{"numRecords":22,"minValues":{"d":12345678901234567.891},"tightBounds":true}'


def _rewritten(
    sources: tuple[AddFile, ...],
    runs: tuple[Run, ...],
    physical_rows: tuple[int, ...],
    offsets: tuple[int, ...] | None,
) -> RewrittenBin:
    """The bin of ``sources`` rewritten into one output, ``out``, holding ``runs``."""
    b = Bin({}, sources, 300, purges_dvs=False, needs_footer_counts=False)
    return RewrittenBin(
        bin=b,
        key="out",
        path="out",
        size=50,
        modification_time=1,
        rows=sum(run.rows for run in runs),
        stats=STATS,
        runs=runs,
        physical_rows=physical_rows,
        offsets=offsets,
    )


def _state(*, tagged: bool = True) -> BinState:
    runs = (Run(0, 10), Run(1, 8), Run(2, 4))
    offsets = (0, 10, 18) if tagged else None
    return initial_state(_rewritten((S0, S1, S2), runs, (10, 10, 4), offsets))


def _bitmaps(*adds: AddFile) -> dict[tuple[str, str | None], BitMap64]:
    out = {}
    for a in adds:
        dv = a.deletion_vector
        out[a.key] = BitMap64() if dv is None else _decoded(dv)
    return out


def _decoded(dv: DeletionVectorDescriptor) -> BitMap64:
    return decode_inline_dv(dv.path_or_inline_dv, dv.size_in_bytes)


def test_remap_moves_new_deletions_to_output_positions() -> None:
    """s1 (run at 10, read with {0, 5}) loses rows 1 and 6: output rows 10 and 14."""
    winner = _add("s1", 10, 0, 1, 5, 6)
    state = apply_steps(
        _state(), [Remap("s1", winner, 7)], _bitmaps(S1, winner), max_masked_ratio=0.5
    )
    assert isinstance(state, BinState)
    assert state.deleted == BitMap64([10, 14])
    assert state.remapped_positions == 2 and state.sources[1].fate is Fate.REMAPPED
    assert state.sources[1].live is winner


def test_two_winners_on_the_same_source_remap_from_the_read_dv() -> None:
    """A second DV update of one source adds only its new rows; the union stays exact."""
    first, second = _add("s1", 10, 0, 1, 5), _add("s1", 10, 0, 1, 5, 9)
    state = apply_steps(_state(), [Remap("s1", first, 7)], _bitmaps(S1, first), max_masked_ratio=1)
    assert isinstance(state, BinState)
    state = apply_steps(
        state, [Remap("s1", second, 8)], _bitmaps(S1, first, second), max_masked_ratio=1
    )
    assert isinstance(state, BinState)
    assert state.deleted == BitMap64([10, 17]) and state.remapped_positions == 2


def test_a_later_dv_that_drops_an_earlier_deletion_aborts() -> None:
    """A second winner whose DV lacks a row the first deleted is a restore: abort."""
    first, second = _add("s1", 10, 0, 1, 5), _add("s1", 10, 0, 5, 9)
    state = apply_steps(_state(), [Remap("s1", first, 7)], _bitmaps(S1, first), max_masked_ratio=1)
    assert isinstance(state, BinState)
    result = apply_steps(
        state, [Remap("s1", second, 8)], _bitmaps(S1, first, second), max_masked_ratio=1
    )
    assert isinstance(result, Abort) and result.reason == "dv_restored"


def test_mask_deletes_the_whole_run() -> None:
    """A copy-on-write removal of s2 deletes its run [18, 22) and drops its tombstone; the
    others keep their runs' tags (their read-time DVs, so the runs are still exact)."""
    state = apply_steps(_state(), [Mask("s2", 7)], {}, max_masked_ratio=0.5)
    assert isinstance(state, BinState)
    assert state.deleted == BitMap64(range(18, 22)) and state.masked_positions == 4
    removes = bin_actions(state, now_ms=1, output_dv=_dv(state))[1:]
    assert [r.path for r in removes] == ["s0", "s1"]
    assert [r.tags for r in removes] == [composition_tags("out", 0, 10), RUN_S1]


def test_mask_over_the_ceiling_aborts() -> None:
    """Masking s0's 10 of 22 rows is over a 0.4 ceiling: the bin aborts."""
    result = apply_steps(_state(), [Mask("s0", 7)], {}, max_masked_ratio=0.4)
    assert isinstance(result, Abort) and result.reason == "mask_ceiling_exceeded"


def test_an_untagged_bin_cannot_be_reconciled() -> None:
    """Without a proven composition nothing can be remapped: abort."""
    result = apply_steps(_state(tagged=False), [Mask("s2", 7)], {}, max_masked_ratio=1)
    assert isinstance(result, Abort) and result.reason == "composition_unknown"


def test_a_position_beyond_the_run_aborts() -> None:
    """A winner DV naming a row past the source's rows aborts instead of clamping."""
    winner = _add("s2", 4, 4)
    result = apply_steps(
        _state(), [Remap("s2", winner, 7)], _bitmaps(S2, winner), max_masked_ratio=1
    )
    assert isinstance(result, Abort) and result.reason == "position_outside_run"


def _dv(state: BinState) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor.inline(state.deleted)


def test_reconciled_actions() -> None:
    """The output add keeps dataChange=false and gets the DV and loose (exact) stats; the
    remapped source's tombstone carries the winner's DV and no tags (its run was counted
    under Dr); the untouched sources keep their read-time DVs and their runs' tags."""
    winner = _add("s1", 10, 0, 1, 5)
    state = apply_steps(
        _state(), [Remap("s1", winner, 7)], _bitmaps(S1, winner), max_masked_ratio=1
    )
    assert isinstance(state, BinState)
    add, *removes = bin_actions(state, now_ms=1, output_dv=_dv(state))
    assert isinstance(add, AddFile) and not add.data_change
    assert add.deletion_vector == _dv(state)
    assert (
        add.stats == '{"numRecords":22,"minValues":{"d":12345678901234567.891},"tightBounds":false}'
    )
    assert [r.deletion_vector for r in removes] == [None, winner.deletion_vector, None]
    assert all(isinstance(r, RemoveFile) and not r.data_change for r in removes)
    assert [r.tags for r in removes] == [
        composition_tags("out", 0, 10),
        None,
        composition_tags("out", 18, 4),
    ]


def test_untouched_bin_keeps_tight_stats_and_tags() -> None:
    """A bin no winner touched commits as before: no DV, its stats as written, tagged."""
    add, *removes = bin_actions(_state(), now_ms=1, output_dv=None)
    assert isinstance(add, AddFile) and add.deletion_vector is None and add.stats == STATS
    assert all(COMPACTED_INTO in (r.tags or {}) for r in removes)


def test_an_output_with_every_row_deleted_is_dropped() -> None:
    """When the winners deleted every output row, only the removes are committed."""
    winners = [_add("s0", 10, *range(10)), _add("s1", 10, *range(10)), _add("s2", 4, *range(4))]
    steps = [Remap(w.path, w, 7) for w in winners]
    state = apply_steps(_state(), steps, _bitmaps(S0, S1, S2, *winners), max_masked_ratio=1)
    assert isinstance(state, BinState) and state.output_dropped
    actions = bin_actions(state, now_ms=1, output_dv=None)
    assert all(isinstance(a, RemoveFile) for a in actions) and len(actions) == 3


def test_a_dropped_output_is_named_by_no_tag() -> None:
    """Masks delete every row but s1's, and s1 was read with every row deleted (an empty
    run): the output is dropped, and s1's tombstone names no output that is not committed."""
    done = _rewritten((S0, _add("s1", 2, 0, 1)), (Run(0, 10),), (10, 2), (0, 10))
    state = apply_steps(initial_state(done), [Mask("s0", 7)], {}, max_masked_ratio=1)
    assert isinstance(state, BinState) and state.output_dropped
    (remove,) = bin_actions(state, now_ms=1, output_dv=None)
    assert isinstance(remove, RemoveFile) and remove.path == "s1" and remove.tags is None


def test_loose_stats_keep_decimals_exact() -> None:
    """tightBounds becomes false and a 20-digit decimal bound keeps every digit."""
    loose = loose_stats(STATS)
    assert loose is not None and "12345678901234567.891" in loose
    assert json.loads(loose, parse_float=Decimal)["minValues"]["d"] == Decimal(
        "12345678901234567.891"
    )
    assert loose_stats(None) is None


@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan"), True])
def test_max_masked_ratio_is_validated(ratio: float) -> None:
    """The mask ceiling is a number in [0, 1], refused otherwise naming the setting."""
    with pytest.raises(ConfigError, match="max_masked_ratio"):
        CompactionPolicy(max_masked_ratio=ratio)
