"""Discovery: the Delta tables under a prefix (a ``[[discover]]`` entry of the config).

A table is a directory holding ``_delta_log/``. The prefix is listed recursively (the store
contract has no delimiter listing), once; when a table's log is seen, its keys are passed
over, and after :data:`SKIP_BEFORE_RESTART` of them the listing restarts past the whole table,
so a big table's data files (which mostly sort after ``_delta_log``: ``part-…``, ``date=…``)
are not walked. Depth, include and exclude rules are the entry's
(:meth:`DiscoverEntry.accepts`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rlcd.daemon.config import DiscoverEntry
from rlcd.delta.log_path import LOG_DIR
from rlcd.storage.base import ObjectStore
from rlcd.storage.uri import TableUri

__all__ = ("Discovered", "discover_tables", "table_uri", "SKIP_BEFORE_RESTART", "EMPTY_PREFIX")

SKIP_BEFORE_RESTART = 1000
"""Keys of one table passed over in the running listing before restarting it past the table
(one S3 page: a small table costs no extra request, a big one not a walk of its files)."""

_PAST = "\U0010ffff"
"""Sorts after any character a key holds: ``start_after=f"{table}/{_PAST}"`` skips the table."""


EMPTY_PREFIX = "nothing is there: the prefix does not exist (a typo?) or is empty"
"""What is said of a prefix that holds no object at all."""


@dataclass(frozen=True, slots=True)
class Discovered:
    """The tables found under a prefix, sorted; ``empty``: the prefix holds no object at all
    (a local directory that does not exist, an S3 prefix with no objects)."""

    tables: tuple[TableUri, ...]
    empty: bool


def table_uri(prefix: TableUri, relative: str) -> TableUri:
    """The table ``relative`` below ``prefix``."""
    if prefix.is_s3:
        joined = f"{prefix.prefix}/{relative}" if prefix.prefix else relative
        return TableUri("s3", prefix.bucket, joined)
    return TableUri("file", "", os.path.join(prefix.prefix, *relative.split("/")))


async def discover_tables(store: ObjectStore, entry: DiscoverEntry) -> Discovered:
    """Every table below the root of ``store`` (rooted at ``entry.prefix``) the entry takes.

    Raises:
        StorageError: the listing failed.
    """
    found: list[TableUri] = []
    marker = f"/{LOG_DIR}/"
    start: str | None = None
    empty = True
    while True:
        table: str | None = None  # the table whose keys are being passed over
        skipped = 0
        restart = None
        async for meta in store.list("", start_after=start):
            empty = False
            key = f"/{meta.key}"
            if table and key.startswith(f"/{table}/"):
                skipped += 1
                if skipped > SKIP_BEFORE_RESTART:
                    restart = f"{table}/{_PAST}"
                    break
                continue
            at = key.find(marker)
            if at < 0:
                continue
            table, skipped = key[1:at], 0
            if table and entry.accepts(table):
                found.append(table_uri(entry.prefix, table))
        if restart is None:
            return Discovered(tuple(sorted(set(found), key=str)), empty)
        start = restart
