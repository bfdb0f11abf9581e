"""Real interleavings for the reconcile tests: a store that holds the loser's commit put until
the winner has committed, the tables (local or on moto's S3) and the winners, and the judges.

A compaction runs on a :class:`HoldingStore` wrapped around the real store. When it puts a
commit file, the store first runs the next hold (a real writer committing through its own store
or through delta-rs), and only then hands the put on: the compaction's put then meets the
winner's commit exactly as it would in a real race, and everything after it (reading the
winners, rebasing, the retry) is rlcd's own code against real storage.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import deltalake
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap64

from rlcd.compaction.compact import CompactionReport, compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.actions import Action, AddFile, CommitInfo, RemoveFile
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.load import load_snapshot, read_commit, read_deletion_vector
from rlcd.delta.names import rlcd_file_uuid
from rlcd.delta.replay import Snapshot
from rlcd.delta.write import make_commit_info, write_commit
from rlcd.operations._dv_writer import delete_rows
from rlcd.operations.verify import CommitCheck, verify_table
from rlcd.reconcile.bin_actions import loose_stats
from rlcd.reconcile.tags import COMPACTED_INTO
from rlcd.storage import AlreadyExists, ObjectStore, PutResult, S3Config, open_store
from tests.integration.tables import S3Mirror, append, kernel_rows

POLICY = CompactionPolicy(target_file_size=64 * 1024 * 1024)
ROWS = 20
_COMMIT = re.compile(r"_delta_log/\d{20}\.json")

Hold = Callable[[], Awaitable[None]]


class HoldingStore:
    """Delegates to ``inner``; each commit put first awaits the next of ``holds``."""

    def __init__(self, inner: ObjectStore, holds: Iterable[Hold]) -> None:
        self._inner = inner
        self.holds = collections.deque(holds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def root(self) -> str:
        return self._inner.root

    async def put_if_absent(self, key: str, data: bytes) -> PutResult:
        if _COMMIT.fullmatch(key) and self.holds:
            await self.holds.popleft()()
        return await self._inner.put_if_absent(key, data)


def batch(start: int, n: int = ROWS, **extra: Any) -> pa.Table:
    """``n`` rows with ids from ``start``, in id order (so position p of a file is its
    first id + p)."""
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), **extra})


@dataclass
class RaceTable:
    """A DV-enabled table of ``files`` files of :data:`ROWS` rows, ids ``0..files*ROWS``,
    file k holding ids ``[k*ROWS, (k+1)*ROWS)``; local, or on moto's S3."""

    uri: str
    s3: S3Config | None
    storage_options: dict[str, str] | None
    view: Callable[[], Path]  # a local copy of the table as it is now, for the readers

    def store(self) -> AbstractAsyncContextManager[ObjectStore]:
        return open_store(self.uri, s3=self.s3)

    def delta(self) -> deltalake.DeltaTable:
        return deltalake.DeltaTable(self.uri, storage_options=self.storage_options)


def make_table(path: Path, files: int, *, partitioned: bool) -> None:
    for k in range(files):
        extra = {"part": [["a", "b"][k % 2]] * ROWS} if partitioned else {}
        append(
            path,
            batch(k * ROWS, **extra),
            partition_by=["part"] if partitioned else None,
            configuration={"delta.enableDeletionVectors": "true"} if k == 0 else None,
        )


def local_table(path: Path, files: int = 4, *, partitioned: bool = False) -> RaceTable:
    make_table(path, files, partitioned=partitioned)
    return RaceTable(str(path), None, None, lambda: path)


def s3_table(
    local: Path, endpoint: str, bucket: str, files: int = 4, *, partitioned: bool = False
) -> RaceTable:
    make_table(local / "src", files, partitioned=partitioned)
    mirror = S3Mirror(endpoint, bucket)
    uri = mirror.upload(local / "src", "race/t")
    options = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag",
    }
    return RaceTable(uri, mirror.config, options, lambda: mirror.download("race/t", local / "v"))


def first_ids(snapshot: Snapshot) -> dict[int, AddFile]:
    """Each live file by the first id it holds."""
    return {a.parsed_stats["minValues"]["id"]: a for a in snapshot.files.values()}


async def dv_delete(table: RaceTable, deletions: Mapping[int, Iterable[int]]) -> int:
    """rlcd's DV writer deletes ``positions`` of the file whose first id is each key."""
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        files = first_ids(snapshot)
        return await delete_rows(
            store, snapshot, {files[k].path: list(p) for k, p in deletions.items()}
        )


async def set_dv(table: RaceTable, first_id: int, positions: Iterable[int]) -> int:
    """Commit ``remove(S) + add(S, DV)`` with exactly ``positions`` (an inline DV), whatever S
    had: deleting every row of a file (which rlcd's writer would remove instead), or a DV
    with fewer rows than before, as a RESTORE of an older version commits it."""
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        add = first_ids(snapshot)[first_id]
        bitmap = BitMap64(positions)
        dv = DeletionVectorDescriptor.inline(bitmap) if bitmap else None
        actions: list[Action] = [
            make_commit_info(
                operation="RESTORE" if len(bitmap) < add.deleted_rows else "DELETE",
                parameters={},
                read_version=snapshot.version,
                previous_ict=None,
                isolation_level="Serializable",
                is_blind_append=False,
                metrics={},
                txn_id=os.urandom(8).hex(),
                now_ms=1,
                in_commit_timestamps=False,
            ),
            add.tombstone(now_ms=1, data_change=True),
            dataclasses.replace(
                add, deletion_vector=dv, data_change=True, stats=loose_stats(add.stats)
            ),
        ]
        await write_commit(store, snapshot.version + 1, actions)
        return snapshot.version + 1


async def databricks_compact(
    store: ObjectStore, snapshot: Snapshot, sources: Sequence[AddFile], *, tagged: int | None = None
) -> int | None:
    """Compact ``sources`` (one partition, with or without DVs) the way Databricks' OPTIMIZE
    commits it: one output of their live rows in order, each tombstone keyed by the DV the
    source had and tagged with its single run (``sourceNumPhysicalRecords`` the physical
    count) next to Databricks' own tags (``INSERTION_TIME`` …, an extra ``compactionInfo``
    member); only the first ``tagged`` tombstones are tagged when given (a partly tagged
    compaction). Returns the version, or None when another commit took it (the output is
    deleted: nothing is left behind)."""
    assert len({tuple(sorted(s.partition_values.items())) for s in sources}) == 1
    parts = []
    for source in sources:
        rows = pq.read_table(pa.BufferReader(await store.get(source.path)))
        live = np.ones(rows.num_rows, dtype=bool)
        dv = await read_deletion_vector(store, source, version=snapshot.version)
        live[np.asarray(dv.to_array(), dtype=np.int64)] = False
        parts.append((source, rows.num_rows, rows.filter(pa.array(live))))
    data_rows = pa.concat_tables([p for _, _, p in parts])
    assert data_rows.num_rows, "every source row is deleted: Databricks writes no output"
    sink = pa.BufferOutputStream()
    pq.write_table(data_rows, sink)
    data = sink.getvalue().to_pybytes()
    folder = sources[0].path.rpartition("/")[0]
    output = (folder + "/" if folder else "") + f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    await store.put(output, data)
    low, high = pc.min_max(data_rows.column("id")).values()
    stats = {"numRecords": data_rows.num_rows, "tightBounds": True}
    stats |= {"minValues": {"id": low.as_py()}, "maxValues": {"id": high.as_py()}}
    add = AddFile(
        path=output,
        partition_values=sources[0].partition_values,
        size=len(data),
        modification_time=1,
        data_change=False,
        stats=json.dumps(stats),
        tags={"INSERTION_TIME": "1700000000000000", "OPTIMIZE_TARGET_SIZE": "268435456"},
    )
    actions: list[Action] = [CommitInfo(timestamp=1, operation="OPTIMIZE"), add]
    offset = 0
    for k, (source, physical, live_rows) in enumerate(parts):
        info = [{"rowOffsetInTarget": offset, "sourceNumPhysicalRecords": physical, "z": 1}]
        tags = {"INSERTION_TIME": "1700000000000000"}
        if tagged is None or k < tagged:
            tags |= {"compactedInto": json.dumps([output]), "compactionInfo": json.dumps(info)}
        actions.append(source.tombstone(now_ms=1, data_change=False, tags=tags))
        offset += live_rows.num_rows
    if isinstance(await write_commit(store, snapshot.version + 1, actions), AlreadyExists):
        await store.delete(output)
        return None
    return snapshot.version + 1


async def insert(
    table: RaceTable,
    rows: pa.Table,
    *,
    blind: bool,
    operation: str = "WRITE",
    body: bytes | None = None,
) -> int:
    """Commit one new file of ``rows`` (``dataChange=true``, stats on ``id``) as an append
    that says whether it read the table (``isBlindAppend``): an ``INSERT INTO t SELECT ...``
    says false, a plain append true. ``body`` replaces the file's bytes (a corrupt file).
    Returns the version: a lost race is retried on top of the winner, as the rows it writes
    do not depend on the table here."""
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    data = body if body is not None else sink.getvalue().to_pybytes()
    low, high = pc.min_max(rows.column("id")).values()
    stats = {"numRecords": rows.num_rows, "minValues": {"id": low.as_py()}}
    stats |= {"maxValues": {"id": high.as_py()}, "nullCount": {"id": 0}}
    parts = {"part": rows.column("part")[0].as_py()} if "part" in rows.column_names else {}
    folder = "".join(f"{k}={v}/" for k, v in parts.items())
    path = f"{folder}part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    info = {"operationParameters": {"mode": "Append"}, "isBlindAppend": blind}
    actions: list[Action] = [
        CommitInfo(timestamp=1, operation=operation, extra=info),
        AddFile(
            path=path,
            partition_values=parts,
            size=len(data),
            modification_time=1,
            data_change=True,
            stats=json.dumps(stats),
        ),
    ]
    async with table.store() as store:
        await store.put(path, data)
        while True:  # an append commits on top of whatever won meanwhile
            version = (await load_snapshot(store)).version + 1
            if not isinstance(await write_commit(store, version, actions), AlreadyExists):
                return version


async def databricks_optimize(
    table: RaceTable, first_ids_in_order: Iterable[int], *, tagged: int | None = None
) -> int:
    """:func:`databricks_compact` of the files whose first ids are given, in that order."""
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        files = first_ids(snapshot)
        sources = [files[k] for k in first_ids_in_order]
        version = await databricks_compact(store, snapshot, sources, tagged=tagged)
        assert version is not None, "nothing else commits meanwhile"
        return version


async def in_thread(work: Callable[[deltalake.DeltaTable], object], table: RaceTable) -> None:
    """A delta-rs operation on the table, in a worker thread (it blocks)."""
    await anyio.to_thread.run_sync(lambda: work(table.delta()))


async def compact(
    table: RaceTable, holds: Iterable[Hold], policy: CompactionPolicy = POLICY
) -> CompactionReport:
    """Compact once, each commit put held until the next hold (a winner) has committed."""
    async with table.store() as inner:
        store = HoldingStore(inner, holds)
        report = await compact_table(store, policy)  # type: ignore[arg-type]
        assert not store.holds, "every winner ran"
    return report


async def rlcd_files(table: RaceTable) -> set[str]:
    """Every file with an rlcd name in the table (outputs and DV files)."""
    async with table.store() as store:
        return {m.key async for m in store.list("") if rlcd_file_uuid(m.key.rsplit("/")[-1])}


async def last_commit(table: RaceTable) -> list[Action]:
    async with table.store() as store:
        snapshot = await load_snapshot(store)
        return await read_commit(store, snapshot.version, table=store.root)


def _ids(rows: pa.Table) -> collections.Counter[int]:
    return collections.Counter(rows.column("id").to_pylist())


async def judge(table: RaceTable, expected: Iterable[int]) -> None:
    """delta-rs, the kernel and ``rlcd verify`` agree: each expected id exactly once, and every
    tagged commit (partly tagged ones included) verifies."""
    want = collections.Counter(expected)
    view = table.view()
    assert _ids(pa.table(deltalake.DeltaTable(str(view)).scan().read_all())) == want
    assert collections.Counter(dict(r)["id"] for r in kernel_rows(view).elements()) == want
    async with table.store() as store:
        report = await verify_table(store)
    problems = {c.version: c.problems for c in report.commits or () if c.problems}
    assert not problems, problems
    assert report.files is None or not report.files.problems, report.files.problems


async def tagged_sources(table: RaceTable) -> tuple[set[str], set[str]]:
    """The paths of the last commit's tombstones with composition tags, and without."""
    removes = [a for a in await last_commit(table) if isinstance(a, RemoveFile)]
    tagged = {r.path for r in removes if COMPACTED_INTO in (r.tags or {})}
    return tagged, {r.path for r in removes} - tagged


async def tag_check(table: RaceTable) -> CommitCheck:
    """``rlcd verify``'s check of the latest commit with composition tags."""
    async with table.store() as store:
        report = await verify_table(store, files=False)
    assert report.commits, "no tagged commit"
    return report.commits[-1]
