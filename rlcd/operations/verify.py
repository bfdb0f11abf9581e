"""``rlcd verify``: does the table hold what its log says?

Two halves, each runnable alone: the *files* half checks the current snapshot against storage
(every live file and deletion vector: :mod:`rlcd.operations._verify_files`), the *tags* half
checks every composition-tagged commit still in the log against the data it describes
(:mod:`rlcd.operations._verify_tags`). Both read the one snapshot loaded here.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcd.compaction.compact import rewrite_settings
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.load import load_snapshot, table_config
from rlcd.operations._verify_files import FILE_CHECK_CONCURRENCY, check_files
from rlcd.operations._verify_rules import FileProblem, FilesCheck
from rlcd.operations._verify_tags import CommitCheck, check_tags
from rlcd.storage.base import ObjectStore

__all__ = ("CommitCheck", "FileProblem", "FilesCheck", "VerifyReport", "verify_table")


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """A verification of ``table`` at ``version``. A half not asked for is ``None``."""

    table: str
    version: int
    files: FilesCheck | None
    commits: tuple[CommitCheck, ...] | None

    @property
    def problems(self) -> int:
        """Problems found by both halves."""
        in_files = len(self.files.problems) if self.files is not None else 0
        return in_files + sum(len(c.problems) for c in self.commits or ())

    @property
    def ok(self) -> bool:
        return not self.problems


async def verify_table(
    store: ObjectStore,
    *,
    files: bool = True,
    tags: bool = True,
    concurrency: int = FILE_CHECK_CONCURRENCY,
) -> VerifyReport:
    """Verify the table's live files (``files``) and its tagged commits (``tags``).

    Args:
        concurrency: live files checked at once (requests in flight) in the files half.

    Raises:
        TableError: the log cannot be read (the table as a whole, not one file).
        StorageError: storage refused or kept failing.
    """
    snapshot = await load_snapshot(store)
    files_check = await check_files(store, snapshot, concurrency=concurrency) if files else None
    commits = None
    if tags:
        options = rewrite_settings(snapshot, table_config(snapshot), CompactionPolicy()).read
        commits = await check_tags(store, options, frozenset(snapshot.files))
    return VerifyReport(store.root, snapshot.version, files_check, commits)
