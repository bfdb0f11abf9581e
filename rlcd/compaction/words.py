"""The words reports share: counted nouns and partition values. Pure and light: ``rlcd
--help`` imports it (through the CLI's report) without the compaction stack."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ("count", "partition_text", "unfinished_write")


def count(n: int, noun: str) -> str:
    """``1 bin``, ``2 bins``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def partition_text(values: Mapping[str, str | None], columns: Sequence[str] = ()) -> str:
    """``region=us, day=2026-11-30`` in the order of ``columns`` (the table's, not the log's,
    which may differ from file to file; names it lacks follow); a null value (JSON null or
    ``""``, §2.11) as ``part IS NULL``, the way ``--where`` selects it."""
    position = {c: i for i, c in enumerate(columns)}
    keys = sorted(values, key=lambda k: position.get(k, len(position)))
    text = ", ".join(
        f"{k} IS NULL" if values[k] in (None, "") else f"{k}={values[k]}" for k in keys
    )
    return text or "(unpartitioned)"


def unfinished_write(table: str) -> str:
    """What a write left unfinished is on the store of ``table`` (a URI): a multipart upload
    on S3, a temp file beside its target on local disk."""
    return "unfinished upload" if table.startswith("s3://") else "temp file"
