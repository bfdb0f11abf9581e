"""What one winning commit means for each bin of a compaction that lost the race. Pure.

The conflict matrix of design §4, as data: :data:`TABLE_RULES` are checked first (a winner that
changes the table's metadata or protocol aborts every bin), then each source of a bin that the
winner touched is matched against :data:`SOURCE_RULES`, first match wins, and the last rule
catches everything else (abort: never guess). A bin's decision is the fold of its sources':

- :class:`Retry`: the winner touched none of the bin's sources (appends, txn and domain
  actions, files outside the bin): commit at the next version.
- :class:`Reconcile`: every touched source can be carried over, by a :class:`Remap` (the winner
  updated the source's DV) or a :class:`Mask` (a copy-on-write winner removed it). Whether the
  positions really fit (``Dw ⊇ Dr``, inside the run) and the masked fraction stays under the
  ceiling is checked when the steps are applied (:mod:`rlcd.reconcile.bin_actions`), since that
  needs the DVs' contents.
- :class:`~rlcd.delta.outcome.Abort`: the bin cannot commit; ``reason`` is one of
  :data:`REASONS` (stable metric labels).

Classification runs one winner at a time against the sources' *current* live adds (after the
earlier winners were applied), so several winners in a row, also on the same source, are each
judged against the DV the one before left.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from rlcd.delta.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile
from rlcd.delta.outcome import Abort
from rlcd.delta.replay import canonical_path
from rlcd.reconcile.remap import DV_RESTORED
from rlcd.reconcile.tags import Composition, parse_composition

__all__ = (
    "METADATA_CHANGED",
    "PROTOCOL_CHANGED",
    "SOURCE_COMPACTED",
    "SOURCE_READDED",
    "AMBIGUOUS_CHANGE",
    "UNEXPECTED_TOMBSTONE",
    "SOURCE_REWRITTEN",
    "DVS_NOT_ENABLED",
    "REASONS",
    "Retry",
    "Remap",
    "Mask",
    "Reconcile",
    "Decision",
    "BinDecision",
    "Touch",
    "Rule",
    "TABLE_RULES",
    "SOURCE_RULES",
    "classify_winner",
    "Compacted",
    "compaction_runs",
)
__pure__ = True

METADATA_CHANGED: Final = "metadata_changed"
PROTOCOL_CHANGED: Final = "protocol_changed"
SOURCE_COMPACTED: Final = "source_compacted"
SOURCE_READDED: Final = "source_readded"
AMBIGUOUS_CHANGE: Final = "ambiguous_change"
UNEXPECTED_TOMBSTONE: Final = "unexpected_tombstone"
SOURCE_REWRITTEN: Final = "source_rewritten"
DVS_NOT_ENABLED: Final = "dvs_not_enabled"
REASONS: Final = (
    METADATA_CHANGED,
    PROTOCOL_CHANGED,
    SOURCE_COMPACTED,
    SOURCE_READDED,
    AMBIGUOUS_CHANGE,
    UNEXPECTED_TOMBSTONE,
    SOURCE_REWRITTEN,
    DV_RESTORED,
    DVS_NOT_ENABLED,
)
"""Every reason code this module gives (the reconcile adds its own)."""


@dataclass(frozen=True, slots=True)
class Retry:
    """The winner left the bin alone: commit it unchanged at the next version."""


@dataclass(frozen=True, slots=True)
class Remap:
    """The winner replaced ``source``'s DV: ``winner`` is its new live add (carrying ``Dw``)."""

    source: str
    winner: AddFile
    version: int


@dataclass(frozen=True, slots=True)
class Mask:
    """The winner removed ``source`` outright, with ``dataChange=true`` (copy-on-write)."""

    source: str
    version: int


@dataclass(frozen=True, slots=True)
class Reconcile:
    """Every source the winner touched can be carried over: apply ``steps`` in order."""

    steps: tuple[Remap | Mask, ...]


Decision = Retry | Remap | Mask | Abort
"""What a rule decides for one touched source (:class:`Retry` only for untouched ones)."""
BinDecision = Retry | Reconcile | Abort
"""What one winner means for one bin."""


@dataclass(frozen=True, slots=True)
class Touch:
    """What one winner commit did to one source: its removes and adds of the source's path.

    ``live`` is the source as this compaction currently knows it (its tombstone's key);
    ``dvs_enabled`` says whether the table lets new DVs be written (so a mask or a remap can
    put one on the output).
    """

    source: str
    version: int
    operation: str
    live: AddFile
    removes: tuple[RemoveFile, ...]
    adds: tuple[AddFile, ...]
    dvs_enabled: bool

    @property
    def where(self) -> str:
        return f"version {self.version} ({self.operation}) on source {self.live.path}"


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the matrix: when ``applies``, ``decide``. ``row`` quotes design §4."""

    row: str
    applies: Callable[[Touch], bool]
    decide: Callable[[Touch], Decision] = field(repr=False)


def _abort(reason: str, what: str) -> Callable[[Touch], Decision]:
    return lambda t: Abort(reason, f"{t.where}: {what}")


def _shrank(t: Touch) -> bool:
    return t.adds[0].deleted_rows < t.live.deleted_rows


SOURCE_RULES: Final[tuple[Rule, ...]] = (
    Rule(
        "added the source's path again without removing it",
        lambda t: not t.removes,
        _abort(SOURCE_READDED, "added again without a remove"),
    ),
    Rule(
        "removed or added the source more than once in one commit",
        lambda t: len(t.removes) > 1 or len(t.adds) > 1,
        _abort(AMBIGUOUS_CHANGE, "removed or added more than once"),
    ),
    Rule(
        "removed a version of the source that is not the live one",
        lambda t: t.removes[0].dv_unique_id != t.live.dv_unique_id,
        _abort(UNEXPECTED_TOMBSTONE, "its tombstone does not carry the live DV"),
    ),
    Rule(
        "removed the source as part of another compaction (dataChange=false)",
        lambda t: not t.removes[0].data_change or any(not a.data_change for a in t.adds),
        _abort(SOURCE_COMPACTED, "rewritten by another compaction"),
    ),
    Rule(
        "removed the source outright, and the table cannot hold DVs",
        lambda t: not t.adds and not t.dvs_enabled,
        _abort(DVS_NOT_ENABLED, "removed by a rewrite, and the table takes no new DVs"),
    ),
    Rule(
        "removed the source outright (copy-on-write DELETE/UPDATE/MERGE)",
        lambda t: not t.adds,
        lambda t: Mask(t.source, t.version),
    ),
    Rule(
        "re-added the source with the same DV",
        lambda t: t.adds[0].dv_unique_id == t.live.dv_unique_id,
        _abort(SOURCE_REWRITTEN, "re-added with its DV unchanged"),
    ),
    Rule(
        "updated the source's DV to fewer rows (a restore)",
        _shrank,
        _abort(DV_RESTORED, "its new DV deletes fewer rows"),
    ),
    Rule(
        "updated the source's DV, and the table takes no new DVs",
        lambda t: not t.dvs_enabled,
        _abort(DVS_NOT_ENABLED, "its DV was updated, and the table takes no new DVs"),
    ),
    Rule(
        "updated the source's DV (Dw ⊇ Dr is checked by the remap)",
        lambda _t: True,
        lambda t: Remap(t.source, t.adds[0], t.version),
    ),
)
"""First match wins; the last rule matches every touch that got past the others."""

TABLE_RULES: Final[tuple[tuple[type[Metadata | Protocol], str], ...]] = (
    (Metadata, METADATA_CHANGED),
    (Protocol, PROTOCOL_CHANGED),
)
"""A winner holding one of these actions aborts every bin (re-plan later)."""


def _operation(actions: Sequence[Action]) -> str:
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    return info.operation if info is not None and info.operation else "unknown operation"


def _decide(touch: Touch) -> Decision:
    for rule in SOURCE_RULES:
        if rule.applies(touch):
            return rule.decide(touch)
    raise AssertionError("the last source rule matches every touch")  # pragma: no cover


def _fold(decisions: Sequence[Decision]) -> BinDecision:
    steps: list[Remap | Mask] = []
    for d in decisions:
        if isinstance(d, Abort):
            return d
        if isinstance(d, Remap | Mask):
            steps.append(d)
    return Reconcile(tuple(steps)) if steps else Retry()


def classify_winner(
    sources: Mapping[str, tuple[str, AddFile]],
    bin_ids: Sequence[str],
    version: int,
    actions: Sequence[Action],
    *,
    dvs_enabled: bool,
) -> dict[str, BinDecision]:
    """Each bin's decision for one winner commit.

    Args:
        sources: canonical source path -> (its bin's id, its live add as currently known).
        bin_ids: every bin, so each gets a decision (untouched ones :class:`Retry`).
        version: the winner's version, for the abort details.
        actions: the winner's actions.
        dvs_enabled: whether new DVs may be written to the table.
    """
    what = _operation(actions)
    for action in actions:
        for kind, reason in TABLE_RULES:
            if isinstance(action, kind):
                detail = f"version {version} ({what}) changed the table's {kind.KIND}"
                return {b: Abort(reason, detail) for b in bin_ids}
    removes: dict[str, list[RemoveFile]] = {}
    adds: dict[str, list[AddFile]] = {}
    for action in actions:
        if isinstance(action, RemoveFile) and canonical_path(action.path) in sources:
            removes.setdefault(canonical_path(action.path), []).append(action)
        elif isinstance(action, AddFile) and canonical_path(action.path) in sources:
            adds.setdefault(canonical_path(action.path), []).append(action)
    per_bin: dict[str, list[Decision]] = {b: [] for b in bin_ids}
    for path in (p for p in sources if p in removes or p in adds):
        bin_id, live = sources[path]
        touch = Touch(
            source=path,
            version=version,
            operation=what,
            live=live,
            removes=tuple(removes.get(path, ())),
            adds=tuple(adds.get(path, ())),
            dvs_enabled=dvs_enabled,
        )
        per_bin[bin_id].append(_decide(touch))
    return {b: _fold(ds) for b, ds in per_bin.items()}


# --- for DML writers that lost to a compaction (design §5) -----------------------------------


@dataclass(frozen=True, slots=True)
class Compacted:
    """A file a compaction removed with a composition: its tombstone (keyed by the DV ``Do``
    it was compacted with), the run its live rows took in the output, and the output's add."""

    tombstone: RemoveFile
    run: Composition
    output: AddFile


def compaction_runs(actions: Sequence[Action]) -> dict[str, Compacted] | None:
    """Where each tagged file a winning compaction removed went; None if it is no compaction.

    A compaction (design §5) removes something and changes no data: no remove or add has
    ``dataChange=true``. A tag is a per-source fact, so each tombstone in the single-run form
    (:func:`~rlcd.reconcile.tags.parse_composition`) gives its source's run, whatever the
    other tombstones carry; a source without one is absent (a DML cannot follow its rows).
    An add no tag names is allowed only while some remove is untagged (it may be those
    sources' output); when every remove is tagged, such an add means the commit did more
    than compact: None.

    Returns:
        canonical path of each removed file with a composition -> :class:`Compacted`.
    """
    adds = {a.path: a for a in actions if isinstance(a, AddFile)}
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    changed = any(a.data_change for a in adds.values()) or any(r.data_change for r in removes)
    if not removes or changed:
        return None
    runs: dict[str, Compacted] = {}
    for remove in removes:
        run = parse_composition(remove, adds.keys())
        if run is not None:
            runs[canonical_path(remove.path)] = Compacted(remove, run, adds[run.output_path])
    if len(runs) == len(removes) and {c.run.output_path for c in runs.values()} != adds.keys():
        return None
    return runs
