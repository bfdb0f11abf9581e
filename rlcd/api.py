"""rlcd's public front for Python callers: the names docs/*.md document, from one module.

Import from here rather than from the packages, whose module layout may change. Not imported
by ``rlcd/__init__.py``: ``rlcd --help`` must not pay for the compaction engine's imports.
"""

from rlcd import errors
from rlcd.compaction.cleanup import CleanupReport, clean_table
from rlcd.compaction.compact import CompactionReport, compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.load import load_snapshot
from rlcd.errors import *  # noqa: F403 (the whole error tree, as errors.__all__ lists it)
from rlcd.operations.delete import DeleteReport, delete_rows, delete_where
from rlcd.operations.verify import verify_table
from rlcd.reconcile.classify import compaction_runs
from rlcd.reconcile.remap import forward_remap, merge_same_file, reverse_rebase, run_mask
from rlcd.storage import open_store
from rlcd.storage.s3config import S3Config

__all__ = (
    "compact_table",
    "CompactionPolicy",
    "CompactionReport",
    "clean_table",
    "CleanupReport",
    "delete_where",
    "delete_rows",
    "DeleteReport",
    "verify_table",
    "forward_remap",
    "run_mask",
    "reverse_rebase",
    "merge_same_file",
    "compaction_runs",
    "open_store",
    "S3Config",
    "load_snapshot",
    *errors.__all__,
)
