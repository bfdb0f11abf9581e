"""rlcd's deletion-vector writer: deletes rows by position without rewriting data files.

The DML counterpart of compaction (design §5): it writes one DV file for all files it touches
(or inline DVs), then commits ``remove(old key) + add(new DV)`` per file with ``dataChange=true``.
A file whose every row is deleted is removed outright. Losing the commit race raises
:class:`ConcurrentModificationError` after deleting the DV file it wrote; nothing is committed.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace

import structlog
from pyroaring import BitMap64

from rlcd.delta.actions import Action, AddFile
from rlcd.delta.coordination import ensure_put_if_absent_writers
from rlcd.delta.dv import DeletionVectorDescriptor, encode_dv_file
from rlcd.delta.load import read_deletion_vector, table_config
from rlcd.delta.names import dv_file_name
from rlcd.delta.replay import Snapshot, canonical_path
from rlcd.delta.write import make_commit_info, write_commit
from rlcd.errors import ConcurrentModificationError, TableError, UnsupportedFeatureError
from rlcd.storage.base import AlreadyExists, ObjectStore

__all__ = ("delete_rows",)

log = structlog.get_logger(__name__)


def _loose_stats(add: AddFile) -> str:
    """The add's stats with ``tightBounds=false``: the old bounds stay valid, just wide."""
    stats = dict(add.parsed_stats)
    stats["tightBounds"] = False
    return json.dumps(stats, separators=(",", ":"))


async def delete_rows(
    store: ObjectStore,
    snapshot: Snapshot,
    deletions: Mapping[str, Iterable[int]],
    *,
    inline: bool = False,
    now_ms: int | None = None,
) -> int:
    """Delete rows, given as physical positions per file path, and commit; returns the version.

    Raises:
        UnsupportedFeatureError: the table does not allow row deletions or new deletion
            vectors, or has writers that do not commit with put-if-absent.
        TableError: a path is not live, lacks ``numRecords``, or a position is out of range.
        ConcurrentModificationError: another commit took the next version.
    """
    config = table_config(snapshot)
    config.ensure_rows_deletable()
    await ensure_put_if_absent_writers(store, version=snapshot.version)
    if not config.deletion_vectors_enabled:
        raise UnsupportedFeatureError(
            "deletion vectors are not enabled (delta.enableDeletionVectors)", table=store.root
        )
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    changed: list[tuple[AddFile, BitMap64]] = []
    newly_deleted = 0
    for path, positions in deletions.items():
        add = snapshot.files.get(canonical_path(path))
        if add is None:
            raise TableError(
                "not a live file", table=store.root, version=snapshot.version, path=path
            )
        rows = add.num_records
        if rows is None:
            raise TableError(
                "file has no numRecords in its stats; cannot add a deletion vector",
                table=store.root,
                version=snapshot.version,
                path=path,
            )
        new = BitMap64(positions)
        if len(new) and new.max() >= rows:
            raise TableError(
                f"row position {new.max()} is beyond the file's {rows} rows",
                table=store.root,
                version=snapshot.version,
                path=path,
            )
        old = await read_deletion_vector(store, add, version=snapshot.version)
        merged = old | new
        if merged != old:
            changed.append((add, merged))
            newly_deleted += len(merged) - len(old)
    if not changed:
        return snapshot.version

    dv_key = None
    descriptors: list[DeletionVectorDescriptor | None] = []
    live = [(add, bm) for add, bm in changed if len(bm) < (add.num_records or 0)]
    if inline:
        descriptors = [DeletionVectorDescriptor.inline(bm) for _, bm in live]
    elif live:
        dv_id, dv_key = dv_file_name(os.urandom(16))
        data, ranges = encode_dv_file([bm for _, bm in live])
        await store.put_if_absent(dv_key, data)
        descriptors = [
            DeletionVectorDescriptor.for_file(
                uuid=dv_id, offset=offset, size_in_bytes=size, cardinality=len(bm)
            )
            for (_, bm), (offset, size) in zip(live, ranges, strict=True)
        ]
    new_dvs = {id(add): dv for (add, _), dv in zip(live, descriptors, strict=True)}

    actions: list[Action] = [
        make_commit_info(
            operation="DELETE",
            parameters={"predicate": "[]"},
            read_version=snapshot.version,
            previous_ict=snapshot.in_commit_timestamp,
            isolation_level="WriteSerializable",
            is_blind_append=False,
            metrics={
                "numDeletedRows": newly_deleted,
                "numRemovedFiles": len(changed) - len(live),
                "numDeletionVectorsAdded": len(live),
            },
            txn_id=str(uuid.uuid4()),
            now_ms=now_ms,
            in_commit_timestamps=config.in_commit_timestamps,
        )
    ]
    for add, _ in changed:
        actions.append(add.tombstone(now_ms=now_ms, data_change=True))
        dv = new_dvs.get(id(add))
        if dv is not None:
            actions.append(
                replace(add, deletion_vector=dv, data_change=True, stats=_loose_stats(add))
            )
    version = snapshot.version + 1
    if isinstance(await write_commit(store, version, actions), AlreadyExists):
        if dv_key is not None:
            await store.delete(dv_key)
        raise ConcurrentModificationError(
            "another writer committed this version first", table=store.root, version=version
        )
    log.info("rows_deleted", table=store.root, version=version, files=len(changed))
    return version
