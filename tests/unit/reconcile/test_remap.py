"""The remapping maths (design §3, §5, §6) against a brute-force model of a compacted output."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pyroaring import BitMap64

from rlcd.delta.outcome import Abort
from rlcd.reconcile.remap import (
    DV_RESTORED,
    OVERLAPPING_DELETES,
    POSITION_OUTSIDE_RUN,
    ROW_ALREADY_DELETED,
    forward_remap,
    merge_same_file,
    reverse_rebase,
    run_mask,
)


@st.composite
def compacted_source(draw: st.DrawFn) -> tuple[int, BitMap64, int, list[int]]:
    """A source of ``P`` rows with read-time DV ``Dr``, placed at offset ``o`` of an output
    whose rows are modelled as ``(source row)`` labels: ``output[o + k]`` is the k-th live row."""
    physical = draw(st.integers(0, 200))
    read_dv = BitMap64(draw(st.sets(st.integers(0, max(physical - 1, 0)), max_size=physical)))
    read_dv = BitMap64(i for i in read_dv if i < physical)
    offset = draw(st.integers(0, 1000))
    output = [-1] * offset + [i for i in range(physical) if i not in read_dv]
    return physical, read_dv, offset, output


@given(compacted_source(), st.data())
def test_forward_remap_keeps_row_identity(
    source: tuple[int, BitMap64, int, list[int]], data: st.DataObject
) -> None:
    """Every row the winner newly deleted maps to the output row holding that very source row,
    and nothing else is marked."""
    physical, read_dv, offset, output = source
    extra = data.draw(st.sets(st.integers(0, max(physical - 1, 0))))
    winner = read_dv | BitMap64(i for i in extra if i < physical)
    live = physical - len(read_dv)
    result = forward_remap(read_dv, offset, live, winner)
    assert not isinstance(result, Abort)
    assert sorted(output[p] for p in result) == sorted(winner - read_dv)
    assert all(offset <= p < offset + live for p in result)


@given(compacted_source(), st.data())
def test_reverse_rebase_keeps_row_identity(
    source: tuple[int, BitMap64, int, list[int]], data: st.DataObject
) -> None:
    """A losing DML's deletions of live rows land on the output rows holding those rows."""
    physical, read_dv, offset, output = source
    live_rows = [i for i in range(physical) if i not in read_dv]
    deletions = BitMap64(data.draw(st.sets(st.sampled_from(live_rows))) if live_rows else ())
    result = reverse_rebase(read_dv, offset, physical - len(read_dv), deletions)
    assert not isinstance(result, Abort)
    assert sorted(output[p] for p in result) == sorted(deletions)


def test_forward_remap_worked_example() -> None:
    """Dr = {1, 3}, o = 10: rows 0, 2, 4, 5 sit at 10..13, so Dw - Dr = {2, 5} maps to {11, 13}."""
    result = forward_remap(BitMap64([1, 3]), 10, 4, BitMap64([1, 2, 3, 5]))
    assert result == BitMap64([11, 13])


def test_forward_remap_refuses_a_shrunk_dv() -> None:
    """A winner DV missing a read-time position (a restore) is an abort, not a remap."""
    result = forward_remap(BitMap64([1, 3]), 0, 4, BitMap64([1, 5]))
    assert isinstance(result, Abort) and result.reason == DV_RESTORED


def test_forward_remap_refuses_a_position_beyond_the_run() -> None:
    """A deleted position past the source's rows is outside the run: abort, never clamp."""
    result = forward_remap(BitMap64(), 0, 4, BitMap64([4]))
    assert isinstance(result, Abort) and result.reason == POSITION_OUTSIDE_RUN


def test_run_mask_is_the_whole_run() -> None:
    """A copy-on-write removal masks exactly the output rows [o, o + L)."""
    assert run_mask(5, 3) == BitMap64([5, 6, 7])
    assert run_mask(5, 0) == BitMap64()


def test_reverse_rebase_refuses_a_row_the_compaction_left_out() -> None:
    """Deleting a row that was already deleted when compacted aborts, as plain Delta would."""
    result = reverse_rebase(BitMap64([2]), 0, 3, BitMap64([2]))
    assert isinstance(result, Abort) and result.reason == ROW_ALREADY_DELETED


def test_reverse_rebase_refuses_a_row_beyond_the_run() -> None:
    """A position beyond the source's live rows has no output row: abort."""
    result = reverse_rebase(BitMap64([0]), 7, 3, BitMap64([4]))
    assert isinstance(result, Abort) and result.reason == POSITION_OUTSIDE_RUN


def test_same_file_merge_of_disjoint_deletes() -> None:
    """Two deletes of different rows of one file merge into the union."""
    assert merge_same_file(BitMap64([0]), BitMap64([0, 1]), BitMap64([0, 2])) == BitMap64([0, 1, 2])


def test_same_file_merge_of_overlapping_deletes_conflicts() -> None:
    """Two deletes sharing a row are a real conflict."""
    result = merge_same_file(BitMap64(), BitMap64([1, 2]), BitMap64([2, 3]))
    assert isinstance(result, Abort) and result.reason == OVERLAPPING_DELETES


def test_same_file_merge_onto_a_restore_conflicts() -> None:
    """A winner that brought rows back cannot be merged onto."""
    result = merge_same_file(BitMap64([1]), BitMap64(), BitMap64([1, 2]))
    assert isinstance(result, Abort) and result.reason == DV_RESTORED


@given(st.sets(st.integers(0, 300)), st.sets(st.integers(0, 300)), st.sets(st.integers(0, 300)))
def test_same_file_merge_model(read: set[int], theirs: set[int], mine: set[int]) -> None:
    """Merge succeeds exactly when the two new deletion sets are disjoint, giving the union."""
    winner, loser = read | theirs, read | mine
    result = merge_same_file(BitMap64(read), BitMap64(winner), BitMap64(loser))
    if (winner - read) & (loser - read):
        assert isinstance(result, Abort)
    else:
        assert result == BitMap64(winner | loser)


def test_positions_past_32_bits() -> None:
    """An output past 4G rows gets positions above 2**32 exactly (the 64-bit path)."""
    base = 2**32 - 1
    assert forward_remap(BitMap64([0]), base, 3, BitMap64([0, 1, 3])) == BitMap64([base, base + 2])
