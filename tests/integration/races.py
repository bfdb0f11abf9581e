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
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import deltalake
import pyarrow as pa
from pyroaring import BitMap64

from rlcd.compaction.compact import CompactionReport, compact_table
from rlcd.compaction.dml import delete_rows
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.reconcile import loose_stats
from rlcd.compaction.verify import verify_table
from rlcd.delta.actions import Action, AddFile
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.load import load_snapshot, read_commit
from rlcd.delta.names import rlcd_file_uuid
from rlcd.delta.replay import Snapshot
from rlcd.delta.write import make_commit_info, write_commit
from rlcd.storage import ObjectStore, PutResult, S3Config, open_store
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
    """delta-rs, the kernel and ``rlcd verify`` agree: each expected id exactly once."""
    want = collections.Counter(expected)
    view = table.view()
    assert _ids(pa.table(deltalake.DeltaTable(str(view)).scan().read_all())) == want
    assert collections.Counter(dict(r)["id"] for r in kernel_rows(view).elements()) == want
    async with table.store() as store:
        report = await verify_table(store)
    assert report.ok, [c.problems for c in report.commits]
