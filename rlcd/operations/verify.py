"""``rlcd verify``: does the table hold what its log says?

Two halves, each runnable alone: the *files* half checks the current snapshot against storage
(every live file and deletion vector: :mod:`rlcd.operations._verify_files`), the *tags* half
checks every composition-tagged commit still in the log against the data it describes
(:mod:`rlcd.operations._verify_tags`). Both read the one snapshot loaded here. A *deep* files
half also reads every live file in full (:mod:`rlcd.operations._verify_deep`), so a file of the
right size whose bytes changed is found too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlcd.compaction.compact import rewrite_settings
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.load import load_snapshot, table_config
from rlcd.operations._verify_deep import DEEP_CHECK_CONCURRENCY
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
    deep: bool = False,
    concurrency: int | None = None,
    on_file: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Verify the table's live files (``files``) and its tagged commits (``tags``).

    Args:
        deep: the files half also reads every live file in full: page checksums where the
            writer stored them, every row group decoded, row counts.
        concurrency: live files checked at once in the files half (default
            ``FILE_CHECK_CONCURRENCY``, or the smaller ``DEEP_CHECK_CONCURRENCY`` when
            ``deep``: each file read in full holds its bytes).
        on_file: called with (files done, files in all) as the files half goes.

    Raises:
        TableError: the log cannot be read (the table as a whole, not one file).
        StorageError: storage refused or kept failing.
    """
    snapshot = await load_snapshot(store)
    options = None  # how to read the data files (from the schema): only reading them needs it
    if tags or (files and deep):
        options = rewrite_settings(snapshot, table_config(snapshot), CompactionPolicy()).read
    files_check = None
    if files:
        if concurrency is None:
            concurrency = DEEP_CHECK_CONCURRENCY if deep else FILE_CHECK_CONCURRENCY
        files_check = await check_files(
            store,
            snapshot,
            concurrency=concurrency,
            deep=options if deep else None,
            on_file=on_file,
        )
    commits = None
    if tags and options is not None:
        commits = await check_tags(store, options, frozenset(snapshot.files))
    return VerifyReport(store.root, snapshot.version, files_check, commits)
