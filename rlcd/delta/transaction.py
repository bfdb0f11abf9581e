"""One optimistic transaction against the log: build, put-if-absent, settle, rebase, back off.

Every writer of rlcd (compaction, the DV delete) commits through :func:`run_transaction`. The
caller holds a state value and gives two functions: ``build`` turns the state into the actions
of the next attempt (writing whatever files they name, so it may do IO), and ``rebase`` turns
the state and the winners that took the version into the state of the next attempt, or an
:class:`~rlcd.delta.outcome.Abort`. The driver does the rest:

1. ``build(state, snapshot, txn_id)`` for version ``snapshot.version + 1``;
2. put the commit (:func:`attempt_commit`): :class:`Committed`, :class:`Conflict` with the
   winners read by key, or :class:`Unknown` when the store kept failing;
3. on a conflict, replay the winners onto the snapshot, ``rebase``, wait a jittered backoff
   (the full-jitter schedule of :mod:`rlcd.storage.retry`) and go back to 1;
4. once committed, write the version's checkpoint when ``delta.checkpointInterval`` says it is
   due, then clean up the expired log
   (:func:`rlcd.delta.checkpoint_writer.checkpoint_after_commit`; a failure is a warning); the
   result says which checkpoint it wrote, so the callers above (the daemon's metrics) count it.

An ambiguous put (the store failed, so the object may or may not have been stored) is settled
by putting the same bytes again and reading the ``txnId`` of whatever holds the version (Spark
does the same): the transaction id stays the same across attempts. Only when the store keeps
failing is the outcome :class:`Unknown`: the commit may still have landed, so the caller must
keep the files it names.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import anyio
import structlog

from rlcd.delta.actions import Action, CommitInfo
from rlcd.delta.checkpoint_writer import CheckpointWritten, checkpoint_after_commit
from rlcd.delta.load import read_commit, read_commits_after
from rlcd.delta.outcome import Abort
from rlcd.delta.replay import Snapshot, replay
from rlcd.delta.write import write_commit
from rlcd.errors import ConcurrentModificationError, StorageError
from rlcd.storage.base import ObjectStore, Written
from rlcd.storage.retry import RetryPolicy, backoff_delay

__all__ = (
    "ATTEMPTS_EXHAUSTED",
    "CONFLICT_BACKOFF",
    "Winner",
    "Committed",
    "Conflict",
    "Unknown",
    "PutOutcome",
    "TransactionResult",
    "attempt_commit",
    "run_transaction",
    "discard_files",
)

ATTEMPTS_EXHAUSTED: Final = "attempts_exhausted"
CONFLICT_BACKOFF: Final = RetryPolicy(max_attempts=10, base_s=0.05, cap_s=2.0)
"""Between attempts after a lost race: the first waits below 50 ms, then doubling to 2 s."""

S = TypeVar("S")
Winner = tuple[int, Sequence[Action]]
"""A winning commit: its version and actions."""

_log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Committed:
    """Our commit holds ``version``."""

    version: int


@dataclass(frozen=True, slots=True)
class Conflict:
    """Another writer took ``version``; ``winners`` are every commit after the attempt's base,
    read by key in order (the one that took ``version`` and any that landed since)."""

    version: int
    winners: tuple[Winner, ...]


@dataclass(frozen=True, slots=True)
class Unknown:
    """The store kept failing: whether our commit holds ``version`` is not known."""

    version: int
    error: StorageError


PutOutcome = Committed | Conflict | Unknown


@dataclass(frozen=True, slots=True)
class TransactionResult(Generic[S]):
    """How a transaction ended: ``outcome`` with the caller's last ``state``, the number of
    puts made, the table as last seen (the winners replayed), and the ``checkpoint`` written
    after the commit (None: none due, one already there, or it failed)."""

    outcome: Committed | Abort | Unknown
    state: S
    attempts: int
    snapshot: Snapshot
    checkpoint: CheckpointWritten | None = None

    def version(self, failed: str) -> int:
        """The version committed; else the store's error (outcome unknown), or, for an
        abort, a :class:`ConcurrentModificationError` saying ``failed: <abort>``."""
        outcome = self.outcome
        if isinstance(outcome, Unknown):
            raise outcome.error
        if isinstance(outcome, Abort):
            raise ConcurrentModificationError(
                f"{failed}: {outcome}", table=self.snapshot.table, version=self.snapshot.version
            )
        return outcome.version


async def attempt_commit(
    store: ObjectStore, base: Snapshot, actions: Sequence[Action], txn_id: str, *, tries: int = 3
) -> PutOutcome:
    """Put ``actions`` as version ``base.version + 1`` (``actions`` carry ``txn_id``).

    Returns:
        :class:`Committed` when our commit holds the version (also when an earlier try of the
        same bytes landed); :class:`Conflict` with the winners when another commit does;
        :class:`Unknown` when each of ``tries`` puts failed in the store.

    Raises:
        CorruptLogError: a winner is malformed, or a commit up to the version is missing.
    """
    version = base.version + 1
    failure: StorageError | None = None
    for _ in range(tries):
        try:
            if isinstance(await write_commit(store, version, actions), Written):
                return Committed(version)
            holder = await read_commit(store, version, table=store.root)
            if any(isinstance(a, CommitInfo) and a.txn_id == txn_id for a in holder):
                return Committed(version)
            later = await read_commits_after(store, version, through=version, table=store.root)
            winners = [(version, holder), *later]
            return Conflict(version, tuple((v, tuple(a)) for v, a in winners))
        except StorageError as exc:
            failure = exc
    assert failure is not None
    return Unknown(version, failure)


async def run_transaction(
    store: ObjectStore,
    snapshot: Snapshot,
    state: S,
    *,
    build: Callable[[S, Snapshot, str], Awaitable[tuple[Sequence[Action], S] | Abort]],
    rebase: Callable[[S, Snapshot, Sequence[Winner]], Awaitable[S | Abort]],
    txn_id: str,
    max_attempts: int = 10,
    backoff: RetryPolicy = CONFLICT_BACKOFF,
    draw: Callable[[], float] = random.random,
) -> TransactionResult[S]:
    """Commit what ``build`` makes of ``state``, rebasing onto winners, at most
    ``max_attempts`` puts.

    Args:
        build: the next attempt's actions (commitInfo first, carrying ``txn_id``) and the state
            that made them, or an abort (nothing left to commit).
        rebase: the state for the next attempt given the snapshot with the winners replayed
            and the winners, or an abort.
        draw: uniform draws in ``[0, 1)`` for the backoff jitter.

    Returns:
        The outcome (:data:`ATTEMPTS_EXHAUSTED` when every attempt lost) and the last state.
    """
    current = snapshot
    for attempt in range(1, max_attempts + 1):
        built = await build(state, current, txn_id)
        if isinstance(built, Abort):
            return TransactionResult(built, state, attempt - 1, current)
        actions, state = built
        outcome = await attempt_commit(store, current, actions, txn_id)
        if isinstance(outcome, Committed):
            run = await checkpoint_after_commit(store, current, outcome.version, actions)
            written = run.checkpoint if run is not None else None
            checkpoint = written if isinstance(written, CheckpointWritten) else None
            return TransactionResult(outcome, state, attempt, current, checkpoint)
        if isinstance(outcome, Unknown):
            return TransactionResult(outcome, state, attempt, current)
        current = replay(store.root, outcome.winners, base=current)
        _log.info(
            "commit_conflict",
            table=store.root,
            version=outcome.version,
            winners=[v for v, _ in outcome.winners],
            attempt=attempt,
        )
        rebased = await rebase(state, current, outcome.winners)
        if isinstance(rebased, Abort):
            return TransactionResult(rebased, state, attempt, current)
        state = rebased
        if attempt < max_attempts:
            await anyio.sleep(backoff_delay(backoff, attempt - 1, draw()))
    detail = f"every one of {max_attempts} commit attempts lost the race"
    return TransactionResult(Abort(ATTEMPTS_EXHAUSTED, detail), state, max_attempts, current)


async def discard_files(store: ObjectStore, keys: Iterable[str | None], *, what: str) -> None:
    """Delete files no commit names (an abandoned attempt's), best effort: a failure is
    logged as ``<what>_not_deleted``, not raised; the file is then an orphan for cleanup,
    never a wrong table."""
    for key in keys:
        if key is None:
            continue
        try:
            await store.delete(key)
        except StorageError as exc:
            _log.warning(f"{what}_not_deleted", table=store.root, path=key, error=str(exc))
