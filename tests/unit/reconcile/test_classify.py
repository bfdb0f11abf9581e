"""The conflict matrix (design §4): one test per row, the expected decision written out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pyroaring import BitMap64

from rlcd.delta.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile, Txn
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.outcome import Abort
from rlcd.reconcile.classify import (
    BinDecision,
    Mask,
    Reconcile,
    Remap,
    Retry,
    classify_winner,
    compaction_runs,
)
from rlcd.reconcile.tags import composition_tags

A1 = AddFile(path="a1.parquet", size=10, stats='{"numRecords":10}')
A2 = AddFile(path="a2.parquet", size=10, stats='{"numRecords":10}')
B1 = AddFile(path="b1.parquet", size=10, stats='{"numRecords":10}')
SOURCES = {"a1.parquet": ("a", A1), "a2.parquet": ("a", A2), "b1.parquet": ("b", B1)}


def _dv(*rows: int) -> DeletionVectorDescriptor:
    return DeletionVectorDescriptor.inline(BitMap64(rows))


def _with_dv(add: AddFile, *rows: int) -> AddFile:
    return AddFile(
        path=add.path, size=add.size, stats=add.stats, deletion_vector=_dv(*rows) if rows else None
    )


def _remove(add: AddFile, *, data_change: bool = True) -> RemoveFile:
    return add.tombstone(now_ms=1, data_change=data_change)


def _classify(
    actions: Sequence[Action],
    sources: dict[str, tuple[str, AddFile]] = SOURCES,
    *,
    dvs_enabled: bool = True,
) -> dict[str, BinDecision]:
    info = CommitInfo(operation="DELETE")
    return classify_winner(sources, ["a", "b"], 5, [info, *actions], dvs_enabled=dvs_enabled)


def _reason(decision: BinDecision) -> str:
    assert isinstance(decision, Abort), decision
    return decision.reason


def test_append_only_retries() -> None:
    """A winner that only added files leaves every bin to retry."""
    new = AddFile(path="new.parquet", size=1)
    assert _classify([new, Txn(app_id="x", version=1)]) == {"a": Retry(), "b": Retry()}


def test_files_outside_the_bin_retry() -> None:
    """A winner that removed a file no bin holds leaves every bin to retry."""
    other = AddFile(path="other.parquet", size=1)
    assert _classify([_remove(other)]) == {"a": Retry(), "b": Retry()}


def test_dv_update_remaps() -> None:
    """remove(S) + add(S, Dw) with more deleted rows: remap S, the other bin retries."""
    winner = _with_dv(A1, 2, 3)
    decisions = _classify([_remove(A1), winner])
    assert decisions == {"a": Reconcile((Remap("a1.parquet", winner, 5),)), "b": Retry()}


def test_dv_update_that_shrank_aborts() -> None:
    """A DV with fewer deleted rows than the live one (a restore) aborts the bin."""
    live = _with_dv(A1, 1, 2)
    sources = {**SOURCES, "a1.parquet": ("a", live)}
    decisions = _classify([_remove(live), _with_dv(A1, 1)], sources)
    assert _reason(decisions["a"]) == "dv_restored" and decisions["b"] == Retry()


def test_copy_on_write_remove_masks() -> None:
    """A source removed outright with dataChange=true is masked when the table takes DVs."""
    rewritten = AddFile(path="rewritten.parquet", size=5)
    decisions = _classify([_remove(A2), rewritten])
    assert decisions == {"a": Reconcile((Mask("a2.parquet", 5),)), "b": Retry()}


def test_copy_on_write_remove_without_dvs_aborts() -> None:
    """The same removal on a table that takes no DVs aborts the bin."""
    decisions = _classify([_remove(A2)], dvs_enabled=False)
    assert _reason(decisions["a"]) == "dvs_not_enabled" and decisions["b"] == Retry()


def test_another_compaction_aborts() -> None:
    """A source removed with dataChange=false (another compaction) aborts the bin."""
    decisions = _classify([_remove(B1, data_change=False), AddFile(path="c.parquet", size=9)])
    assert decisions["a"] == Retry() and _reason(decisions["b"]) == "source_compacted"


def test_metadata_change_aborts_every_bin() -> None:
    """A schema or property change aborts every bin, touched or not."""
    decisions = _classify([Metadata(id="x")])
    assert {b: _reason(d) for b, d in decisions.items()} == {
        "a": "metadata_changed",
        "b": "metadata_changed",
    }


def test_protocol_change_aborts_every_bin() -> None:
    """A protocol upgrade aborts every bin."""
    decisions = _classify([Protocol(min_reader_version=3, min_writer_version=7)])
    assert {b: _reason(d) for b, d in decisions.items()} == {
        "a": "protocol_changed",
        "b": "protocol_changed",
    }


def test_readded_without_remove_aborts() -> None:
    """An add of a source path with no remove is not a DV update we understand: abort."""
    assert _reason(_classify([_with_dv(A1, 1)])["a"]) == "source_readded"


def test_removed_twice_aborts() -> None:
    """Two removes of one source in one commit are ambiguous: abort."""
    assert _reason(_classify([_remove(A1), _remove(A1)])["a"]) == "ambiguous_change"


def test_tombstone_of_another_dv_aborts() -> None:
    """A remove keyed by a DV the source does not have is not of the live file: abort."""
    stale = _with_dv(A1, 7)
    assert _reason(_classify([_remove(stale), _with_dv(A1, 7, 8)])["a"]) == "unexpected_tombstone"


def test_readded_with_the_same_dv_aborts() -> None:
    """Removing and re-adding a source with its DV unchanged rewrote it some other way: abort."""
    assert _reason(_classify([_remove(A1), A1])["a"]) == "source_rewritten"


def test_dv_update_without_dvs_enabled_aborts() -> None:
    """A DV update on a table that takes no new DVs (the output could not get one): abort."""
    decisions = _classify([_remove(A1), _with_dv(A1, 2)], dvs_enabled=False)
    assert _reason(decisions["a"]) == "dvs_not_enabled"


def test_mixed_dv_update_and_copy_on_write_reconciles_both() -> None:
    """One winner updating one source's DV and rewriting another: both steps, in bin order."""
    winner = _with_dv(A2, 0)
    decisions = _classify([_remove(A1), _remove(A2), winner])
    assert decisions["a"] == Reconcile((Mask("a1.parquet", 5), Remap("a2.parquet", winner, 5)))


def test_one_aborting_source_aborts_the_whole_bin() -> None:
    """All or nothing per bin: a remappable source does not save a bin another source aborts."""
    decisions = _classify([_remove(A1), _with_dv(A1, 1), _remove(A2, data_change=False)])
    assert _reason(decisions["a"]) == "source_compacted"


# --- a DML that lost to a compaction: is the winner one it can follow (design §5)? ------------


def _compaction(*, tags: bool = True, data_change: bool = False) -> list[Action]:
    out = AddFile(path="out.parquet", size=30, data_change=False)
    removes = [
        a.tombstone(
            now_ms=1,
            data_change=data_change,
            tags=composition_tags(out.path, o, 10) if tags or a is A1 else None,
        )
        for a, o in ((A1, 0), (A2, 10))
    ]
    return [CommitInfo(operation="OPTIMIZE"), out, *removes]


def test_a_tagged_compaction_tells_where_each_file_went() -> None:
    """Every remove tagged, the output referenced: each source's run in the output."""
    runs = compaction_runs(_compaction())
    assert runs is not None
    assert {p: (c.run.row_offset, c.run.live, c.output.path) for p, c in runs.items()} == {
        "a1.parquet": (0, 10, "out.parquet"),
        "a2.parquet": (10, 10, "out.parquet"),
    }


def test_a_partly_tagged_compaction_gives_the_tagged_runs() -> None:
    """A tag is a per-source fact: the tagged tombstone gives its run, the untagged one none."""
    runs = compaction_runs(_compaction(tags=False))
    assert runs is not None and list(runs) == ["a1.parquet"]
    assert (runs["a1.parquet"].run.row_offset, runs["a1.parquet"].run.live) == (0, 10)


def test_a_compaction_without_tags_gives_no_run() -> None:
    """No tombstone tagged: a compaction, but no source can be followed."""
    untagged = [replace(a, tags=None) if isinstance(a, RemoveFile) else a for a in _compaction()]
    assert compaction_runs(untagged) == {}


def test_a_data_changing_rewrite_is_not_a_compaction() -> None:
    """Tagged removes with dataChange=true (a rewrite that changed data): not followed."""
    assert compaction_runs(_compaction(data_change=True)) is None


def test_an_add_no_tag_names_is_not_a_compaction() -> None:
    """An extra add no tombstone points at, when every tombstone is tagged: the commit did
    more than compact. With an untagged tombstone the add may be its output."""
    extra = AddFile(path="other.parquet", size=1, data_change=False)
    assert compaction_runs([*_compaction(), extra]) is None
    runs = compaction_runs([*_compaction(tags=False), extra])
    assert runs is not None and list(runs) == ["a1.parquet"]


def test_a_data_changing_add_is_not_a_compaction() -> None:
    """An add with dataChange=true beside tagged removes: the commit changed data."""
    extra = AddFile(path="other.parquet", size=1, data_change=True)
    assert compaction_runs([*_compaction(tags=False), extra]) is None
