"""The exit codes of the ``rlcd`` commands, and what decides them.

A module of its own so that every command module imports it (and nothing imports
:mod:`rlcd.cli.main` back). It imports only :mod:`rlcd.errors`: ``rlcd --help`` shows
:data:`EXIT_HELP` without loading the compaction stack.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from rlcd.errors import ConfigError, RlcdError, StorageError, TableError

if TYPE_CHECKING:
    from rlcd.compaction.compact import CompactionReport

__all__ = (
    "EXIT_OK",
    "EXIT_PROBLEM",
    "EXIT_USAGE",
    "EXIT_TABLE",
    "EXIT_STORAGE",
    "EXIT_SUPERSEDED",
    "EXIT_LEASED",
    "EXIT_BROKEN_PIPE",
    "EXIT_HELP",
    "exit_code",
    "error_exit_code",
    "exit_code_of",
    "worst_exit_code",
)

EXIT_OK: Final = 0
EXIT_PROBLEM: Final = 1
EXIT_USAGE: Final = 2
EXIT_TABLE: Final = 3
EXIT_STORAGE: Final = 4
EXIT_SUPERSEDED: Final = 5
EXIT_LEASED: Final = 6
EXIT_BROKEN_PIPE: Final = 128 + signal.SIGPIPE

EXIT_HELP: Final = """Exit codes:
  0    success, including "nothing to do"
  1    a problem in the work: a bin did not commit because another writer's commit
       conflicted or its data is bad, or a verification failed
  2    bad usage or configuration
  3    the table cannot be read or written (corrupt log, unsupported feature)
  4    storage failed (a refused request, or one still failing after the retries), when
       the run starts or for any bin during it
  5    superseded: every bin that did not commit lost only to another compaction of the
       same files (abort reason source_compacted), which did that work; nothing is wrong
       and nothing needs doing
  6    skipped: another run of rlcd holds the table's lease (who, and until when, is
       printed); nothing was done and nothing is wrong (--no-lease runs anyway)
  130  stopped by SIGINT, 143 by SIGTERM: bins in flight are abandoned, their outputs
       deleted and uploads aborted, nothing is committed
  141  stdout was closed early (a pipe into head)

When bins fail for different reasons, 4 wins over 1, and both win over 5: a storage failure
means the run depended on storage that did not work, and a scheduler retries 4 once storage
works, where 1 needs a person; the report names every bin with its outcome either way.
"""
"""The "Exit codes:" section of the commands' ``--help``."""

_ERROR_CODES: tuple[tuple[type[RlcdError], int], ...] = (
    (ConfigError, EXIT_USAGE),
    (TableError, EXIT_TABLE),
    (StorageError, EXIT_STORAGE),
    (RlcdError, EXIT_PROBLEM),
)


def exit_code(report: CompactionReport) -> int:
    """0 when every planned bin committed; else 4 if any bin failed for storage, else 1 if
    any failed otherwise, else 5: the bins left lost only to another compaction."""
    from rlcd.compaction.compact import FailureKind

    kinds = {f.kind for f in report.failed}
    if FailureKind.STORAGE in kinds:
        return EXIT_STORAGE
    if kinds - {FailureKind.SUPERSEDED}:
        return EXIT_PROBLEM
    return EXIT_SUPERSEDED if kinds else EXIT_OK


def error_exit_code(exc: RlcdError) -> int:
    """The exit code of a command that stopped on ``exc``."""
    return exit_code_of(type(exc))


def exit_code_of(kind: type[BaseException]) -> int:
    """The exit code for an error of type ``kind``; 1 for one that is not rlcd's own."""
    return next((code for k, code in _ERROR_CODES if issubclass(kind, k)), EXIT_PROBLEM)


def worst_exit_code(kinds: Iterable[type[BaseException]]) -> int:
    """The exit code of a run whose tables failed with errors of these types: the highest of
    theirs (storage failed over a table unreadable over another problem); 0 for none."""
    return max(map(exit_code_of, kinds), default=EXIT_OK)
