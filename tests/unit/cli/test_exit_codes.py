"""Which exit code a run's failed bins give."""

from __future__ import annotations

import pytest

from rlcd.cli.exit_codes import exit_code, worst_exit_code
from rlcd.compaction.compact import BinFailure, CompactionReport, FailureKind
from rlcd.compaction.plan import Bin
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.actions import AddFile
from rlcd.errors import (
    ConcurrentModificationError,
    CorruptDataError,
    InternalError,
    MissingDataFileError,
    RetriesExhaustedError,
    StorageError,
)

BIN = Bin(
    {},
    (AddFile(path="a.parquet", size=1), AddFile(path="b.parquet", size=1)),
    2,
    purges_dvs=False,
    needs_footer_counts=False,
)


def _report(*kinds: FailureKind) -> CompactionReport:
    failed = tuple(BinFailure(BIN, kind.value, kind) for kind in kinds)
    return CompactionReport("t", 1, CompactionPolicy(), (BIN,), failed=failed)


@pytest.mark.parametrize(
    ("kinds", "code"),
    [
        ((), 0),
        ((FailureKind.CONFLICT,), 1),
        ((FailureKind.DATA,), 1),
        ((FailureKind.INTERNAL,), 1),
        ((FailureKind.STORAGE,), 4),
        ((FailureKind.DATA, FailureKind.STORAGE, FailureKind.CONFLICT), 4),
        ((FailureKind.SUPERSEDED,), 5),
        ((FailureKind.SUPERSEDED, FailureKind.SUPERSEDED), 5),
        ((FailureKind.SUPERSEDED, FailureKind.CONFLICT), 1),
        ((FailureKind.SUPERSEDED, FailureKind.STORAGE), 4),
    ],
)
def test_storage_wins_over_every_other_failure(kinds: tuple[FailureKind, ...], code: int) -> None:
    """No failure is 0; conflicts, bad data and bugs are 1; any storage failure makes it 4;
    bins that lost only to another compaction are 5, which any real failure outranks."""
    assert exit_code(_report(*kinds)) == code


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (StorageError("AccessDenied", operation="put", key="k"), FailureKind.STORAGE),
        (RetriesExhaustedError("500", operation="get", key="k", attempts=8), FailureKind.STORAGE),
        (MissingDataFileError("gone", table="t", path="a"), FailureKind.DATA),
        (CorruptDataError("bad", table="t", path="a"), FailureKind.DATA),
        (ConcurrentModificationError("lost", table="t"), FailureKind.CONFLICT),
        (InternalError("bug"), FailureKind.INTERNAL),
    ],
)
def test_a_rewrite_error_has_the_kind_of_its_cause(error: Exception, kind: FailureKind) -> None:
    """A missing or corrupt source is bad data, not storage; the store failing is storage."""
    assert FailureKind.of(error) is kind


@pytest.mark.parametrize(
    ("kinds", "code"),
    [
        ((), 0),
        ((ValueError,), 1),
        ((InternalError,), 1),
        ((CorruptDataError, ValueError), 3),
        ((MissingDataFileError, RetriesExhaustedError, InternalError), 4),
    ],
)
def test_run_once_exits_with_the_worst_failing_tables_code(
    kinds: tuple[type[BaseException], ...], code: int
) -> None:
    """``rlcd run --once`` gives what ``compact`` would for each failing table's error (an
    error that is not rlcd's is 1), the worst of them: storage over an unreadable table."""
    assert worst_exit_code(kinds) == code
