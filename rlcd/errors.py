"""The exception tree of rlcd. A leaf module: it imports nothing from rlcd. Pure.

Split by what the caller does about it::

    RlcdError
    ├── StorageError              an object-store call failed (names operation and key)
    │   ├── NotFoundError         the object does not exist
    │   ├── CopyRefusedError      the store refused a server-side copy: fetch the bytes instead
    │   └── TransientStorageError throttling, 5xx, reset, timeout: worth retrying
    │       └── RetriesExhaustedError  ... and the retries ran out
    ├── TableError                the table's content is bad or unusable (names table/version/path)
    │   ├── CorruptLogError       malformed commit, truncated checkpoint, version gap
    │   ├── CorruptDataError      unreadable Parquet, a data file that does not fit its log entry
    │   │   └── MissingDataFileError  a data file the log names is not on storage
    │   ├── DeletionVectorError   DV checksum, magic, size or cardinality mismatch
    │   ├── UnsupportedFeatureError  a protocol rlcd may not read or write
    │   └── ConcurrentModificationError  another writer's commit conflicts with ours
    ├── ConfigError               bad TOML or command-line settings (names the key)
    └── InternalError             a bug in rlcd: an invariant did not hold
"""

from __future__ import annotations

__all__ = (
    "RlcdError",
    "StorageError",
    "NotFoundError",
    "CopyRefusedError",
    "TransientStorageError",
    "RetriesExhaustedError",
    "TableError",
    "CorruptLogError",
    "CorruptDataError",
    "MissingDataFileError",
    "DeletionVectorError",
    "UnsupportedFeatureError",
    "ConcurrentModificationError",
    "ConfigError",
    "InternalError",
)
__pure__ = True


class RlcdError(Exception):
    """Root of every error rlcd raises on purpose."""


class StorageError(RlcdError):
    """An object-store operation failed."""

    def __init__(self, message: str, *, operation: str, key: str) -> None:
        super().__init__(f"{operation} {key}: {message}")
        self.operation = operation
        self.key = key


class NotFoundError(StorageError):
    """The object does not exist."""

    def __init__(self, *, operation: str, key: str) -> None:
        super().__init__("not found", operation=operation, key=key)


class CopyRefusedError(StorageError):
    """The store refused to copy a range of one of its objects itself (S3: a 4xx other than
    throttling on ``UploadPartCopy``, such as ``AccessDenied``); nothing was stored, and the
    same bytes may still be fetched and sent."""


class TransientStorageError(StorageError):
    """Throttling, a server error, a reset connection or a timeout: the call may succeed later."""


class RetriesExhaustedError(TransientStorageError):
    """A transient failure persisted through every retry."""

    def __init__(self, message: str, *, operation: str, key: str, attempts: int) -> None:
        super().__init__(
            f"gave up after {attempts} attempts: {message}", operation=operation, key=key
        )
        self.attempts = attempts


class TableError(RlcdError):
    """Something about one table is wrong; the message names the table, version and file."""

    def __init__(
        self,
        message: str,
        *,
        table: str,
        version: int | None = None,
        path: str | None = None,
    ) -> None:
        where = [f"table {table}"]
        if version is not None:
            where.append(f"version {version}")
        if path is not None:
            where.append(f"file {path}")
        super().__init__(f"{message} ({', '.join(where)})")
        self.table = table
        self.version = version
        self.path = path
        self.detail = message


class CorruptLogError(TableError):
    """A commit, checkpoint or ``_last_checkpoint`` cannot be parsed, or the log has gaps."""


class CorruptDataError(TableError):
    """A data file is missing, truncated or not valid Parquet."""


class MissingDataFileError(CorruptDataError):
    """A data file the log names is not on storage (vacuumed, or deleted behind Delta's back)."""


class DeletionVectorError(TableError):
    """A deletion vector fails its checksum, magic, size or cardinality check, or is missing."""


class UnsupportedFeatureError(TableError):
    """The table's protocol has features rlcd cannot read or cannot write safely."""

    def __init__(
        self,
        message: str,
        *,
        table: str,
        features: tuple[str, ...] = (),
        version: int | None = None,
    ) -> None:
        super().__init__(message, table=table, version=version)
        self.features = features


class ConcurrentModificationError(TableError):
    """A commit that won the race conflicts with ours and cannot be reconciled: nothing of ours
    was committed (mirrors Spark's ``DeltaConcurrentModificationException``)."""


class ConfigError(RlcdError):
    """A setting is invalid; the message names the key path, and ``table`` when the setting
    does not fit one table (a ``--where`` column it lacks): then it starts ``table T: ``."""

    def __init__(self, message: str, *, table: str | None = None) -> None:
        super().__init__(message if table is None else f"table {table}: {message}")
        self.table = table


class InternalError(RlcdError):
    """An invariant rlcd relies on did not hold: a bug, never bad input."""
