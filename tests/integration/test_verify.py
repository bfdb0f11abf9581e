"""``rlcd verify`` checks the table itself, not only the tags: every live file and deletion
vector against storage, and old tagged commits whose files VACUUM removed count as skipped.

Tables come from real writers (delta-rs appends, rlcd's DV writer and compaction, delta-rs
VACUUM); damage is done to them the way it happens (a file deleted or replaced, a byte flipped)
or by rewriting one log entry. Each case runs on a local table, the main ones also on moto S3.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio.lowlevel
import deltalake
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from rlcd.cli.report import print_verify
from rlcd.compaction.compact import compact_table
from rlcd.compaction.policy import CompactionPolicy
from rlcd.delta.dv import DeletionVectorDescriptor
from rlcd.delta.load import load_snapshot
from rlcd.errors import StorageError
from rlcd.operations._dv_writer import delete_rows
from rlcd.operations.verify import verify_table
from rlcd.storage import LocalStore, open_store
from rlcd.storage.base import ObjectMeta, ObjectStore
from tests.conftest import fixture_table
from tests.integration.races import ROWS, RaceTable, databricks_optimize, local_table
from tests.integration.tables import (
    S3Mirror,
    append,
    batch,
    flip_page_byte,
    partitioned,
    unpartitioned,
    with_dvs,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

T = TypeVar("T")
POLICY = CompactionPolicy(target_file_size=64 * 1024 * 1024)
Opener = Callable[[Path], AbstractAsyncContextManager[ObjectStore]]


@pytest.fixture(params=["local", "s3"])
def open_table(request: pytest.FixtureRequest) -> Opener:
    """Opens a table prepared on local disk where the test runs: in place, or uploaded to a
    fresh moto bucket as it is then (damage included)."""
    if request.param == "local":
        return LocalStore
    mirror = S3Mirror(
        request.getfixturevalue("moto_endpoint"), request.getfixturevalue("s3_bucket")
    )

    @asynccontextmanager
    async def on_s3(path: Path) -> AsyncIterator[ObjectStore]:
        uri = mirror.upload(path, f"tables/{path.name}")
        async with open_store(uri, s3=mirror.config) as store:
            yield store

    return on_s3


def _log(path: Path, version: int) -> Path:
    return path / "_delta_log" / f"{version:020d}.json"


def _rewrite(
    path: Path, version: int, change: Callable[[dict[str, Any]], None], *, kind: str = "add"
) -> None:
    """Apply ``change`` to every action of ``kind`` in commit ``version``, in place."""
    actions = [json.loads(line) for line in _log(path, version).read_text().splitlines()]
    for action in actions:
        if kind in action:
            change(action[kind])
    _log(path, version).write_text("".join(json.dumps(a) + "\n" for a in actions))


async def _table_with_dvs(path: Path, *, inline: bool = False) -> tuple[int, list[str]]:
    """A 4-file table whose first two files lost rows through rlcd's DV writer: the delete's
    version and the two files' paths."""
    with_dvs(path)
    async with LocalStore(path) as store:
        snapshot = await load_snapshot(store)
        first, second = list(snapshot.files)[:2]
        version = await delete_rows(
            store, snapshot, {first: [0, 5, 6], second: range(0, 30, 2)}, inline=inline
        )
    return version, [first, second]


def _dv_files(path: Path) -> list[Path]:
    return sorted(path.glob("deletion_vector_*.bin"))


def _problems(report: Any) -> list[str]:
    return [str(p) for p in report.files.problems]


async def test_a_healthy_table_verifies_without_reading_footers(tmp_path: Path) -> None:
    """Every live file and DV of an undamaged table checks out; stats give the row counts, so
    no footer is read."""
    await _table_with_dvs(tmp_path)
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    assert report.ok, report
    assert report.files is not None
    assert (report.files.files, report.files.dvs, report.files.footers) == (4, 2, 0)


async def test_a_deleted_data_file_fails_naming_it(tmp_path: Path, open_table: Opener) -> None:
    """A live data file deleted behind Delta's back fails verify, naming the file (it used to
    pass: the table had no tagged commit to check)."""
    partitioned(tmp_path)
    async with LocalStore(tmp_path) as store:
        victim = list((await load_snapshot(store)).files)[3]
    (tmp_path / victim).unlink()
    async with open_table(tmp_path) as store:
        report = await verify_table(store)
    assert not report.ok
    assert _problems(report) == [f"{victim}: data file is missing"]


async def test_a_file_of_another_size_fails(tmp_path: Path) -> None:
    """A data file whose size is not the one its add says (replaced, truncated or appended to)
    is a problem naming both sizes."""
    partitioned(tmp_path)
    async with LocalStore(tmp_path) as store:
        add = next(iter((await load_snapshot(store)).files.values()))
    with (tmp_path / add.path).open("ab") as f:
        f.write(b"x")
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    assert _problems(report) == [
        f"{add.path}: is {add.size + 1} bytes on storage, its add says {add.size}"
    ]


async def test_a_missing_dv_file_fails_for_every_file_using_it(
    tmp_path: Path, open_table: Opener
) -> None:
    """A DV file gone from storage fails verify for each live file whose DV it holds."""
    _, paths = await _table_with_dvs(tmp_path)
    (dv_file,) = _dv_files(tmp_path)
    dv_file.unlink()
    async with open_table(tmp_path) as store:
        report = await verify_table(store)
    assert _problems(report) == sorted(
        f"{p}: deletion vector file {dv_file.name} is missing" for p in paths
    )


async def test_a_flipped_byte_in_a_dv_file_fails_its_checksum(tmp_path: Path) -> None:
    """One byte flipped inside a DV's bitmap fails its CRC-32, named for the file it serves."""
    _, paths = await _table_with_dvs(tmp_path)
    (dv_file,) = _dv_files(tmp_path)
    data = bytearray(dv_file.read_bytes())
    data[1 + 4 + 6] ^= 0x01  # version byte, the first DV's length, then inside its bitmap
    dv_file.write_bytes(bytes(data))
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    (problem,) = _problems(report)
    assert problem.startswith(f"{paths[0]}: deletion vector ") and "CRC-32 mismatch" in problem


@pytest.mark.parametrize("inline", [False, True], ids=["file-dv", "inline-dv"])
async def test_a_dv_cardinality_other_than_the_descriptor_fails(
    tmp_path: Path, inline: bool
) -> None:
    """A descriptor whose cardinality is not the DV's count of rows fails (file and inline)."""
    version, paths = await _table_with_dvs(tmp_path, inline=inline)

    def miscount(add: dict[str, Any]) -> None:
        if add["path"] == paths[1]:
            add["deletionVector"]["cardinality"] += 1

    _rewrite(tmp_path, version, miscount)
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    (problem,) = _problems(report)
    assert problem.startswith(f"{paths[1]}: deletion vector ")
    assert "cardinality mismatch: decoded 15 rows, descriptor says 16" in problem


@pytest.mark.parametrize("stats", [True, False], ids=["stats", "footer"])
async def test_a_dv_position_beyond_the_rows_fails(tmp_path: Path, stats: bool) -> None:
    """A DV deleting a row at or past the file's row count fails; the count comes from the
    stats, or from the Parquet footer (read only then) when the stats lack it."""
    version, paths = await _table_with_dvs(tmp_path)
    beyond = DeletionVectorDescriptor.inline(BitMap64([3, 30]))  # the file has rows 0..29

    def overreach(add: dict[str, Any]) -> None:
        if add["path"] == paths[0]:
            add["deletionVector"] = beyond.to_json()
            if not stats:
                del add["stats"]

    _rewrite(tmp_path, version, overreach)
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    assert _problems(report) == [
        f"{paths[0]}: its deletion vector deletes row 30, but the file has 30 rows"
    ]
    assert report.files is not None and report.files.footers == (0 if stats else 1)


async def _compacted_and_vacuumed(path: Path) -> None:
    """Compact a table whose sources had DVs, then VACUUM it with delta-rs.

    delta-rs' default (lite) VACUUM deletes only the paths its tombstones name and keeps
    their DV files; ``full=True`` also deletes the unreferenced DV files, as Spark's VACUUM
    does. Safe here: compaction purged every DV, so no live file has one.
    """
    await _table_with_dvs(path)
    async with LocalStore(path) as store:
        report = await compact_table(store, POLICY)
    assert report.committed_version is not None and report.files_removed == 4
    deltalake.DeltaTable(str(path)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    assert not _dv_files(path)


async def test_a_vacuumed_compaction_is_skipped_not_failed(
    tmp_path: Path, open_table: Opener
) -> None:
    """After VACUUM removed an rlcd compaction's sources and their DV files, that commit is
    skipped (its sources gone), while a later compaction is still checked row for row."""
    await _compacted_and_vacuumed(tmp_path)
    for i in range(3):
        append(tmp_path, batch(1000 + i * 10, 10))
    async with LocalStore(tmp_path) as store:
        assert (await compact_table(store, POLICY)).files_removed == 4
    async with open_table(tmp_path) as store:
        report = await verify_table(store)
    assert report.ok, report
    assert report.commits is not None
    old, new = report.commits
    assert old.status == "skipped" and (old.sources_checked, old.sources_skipped) == (0, 4)
    assert new.status == "ok" and (new.sources_checked, new.sources_skipped) == (4, 0)


async def test_a_source_whose_dv_file_alone_is_gone_is_skipped(tmp_path: Path) -> None:
    """A compaction's source still on storage whose DV file was removed cannot be compared (its
    live rows are unknown): it is skipped, the other sources are still checked."""
    await _table_with_dvs(tmp_path)
    async with LocalStore(tmp_path) as store:
        assert (await compact_table(store, POLICY)).files_removed == 4
    (dv_file,) = _dv_files(tmp_path)
    dv_file.unlink()
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    assert report.ok, report
    assert report.commits is not None
    (check,) = report.commits
    assert (check.status, check.sources_checked, check.sources_skipped) == ("ok", 2, 2)


async def test_a_live_dv_deleted_by_a_full_delta_rs_vacuum_is_caught(tmp_path: Path) -> None:
    """delta-rs 1.6's full VACUUM deletes DV files that live files still use (readers then
    fail on the table): verify names the damaged file and its DV file."""
    await _table_with_dvs(tmp_path)
    async with LocalStore(tmp_path) as store:
        assert (await compact_table(store, POLICY)).committed_version is not None
        snapshot = await load_snapshot(store)
        (output,) = snapshot.files
        await delete_rows(store, snapshot, {output: [7]})
        dv = (await load_snapshot(store)).files[output].deletion_vector
    assert dv is not None
    live_dv = dv.file_path()
    deltalake.DeltaTable(str(tmp_path)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    assert _problems(report) == [f"{output}: deletion vector file {live_dv} is missing"]
    assert report.commits is not None and report.commits[0].status == "skipped"


async def test_tags_only_and_files_only_check_their_half_alone(tmp_path: Path) -> None:
    """``files=False`` leaves a missing data file unseen, ``tags=False`` a tampered tag; each
    half still finds its own problem."""
    missing, tampered = tmp_path / "missing", tmp_path / "tampered"
    partitioned(missing)
    victim = next(missing.glob("part=a/*.parquet"))
    victim.unlink()
    partitioned(tampered)
    async with LocalStore(tampered) as store:
        version = (await compact_table(store, POLICY)).committed_version
    assert version is not None

    def misplace(remove: dict[str, Any]) -> None:
        remove["tags"]["compactionInfo"] = json.dumps(
            [{"rowOffsetInTarget": 1, "sourceNumPhysicalRecords": 50}]
        )

    _rewrite(tampered, version, misplace, kind="remove")
    async with LocalStore(missing) as store:
        files_only = await verify_table(store, tags=False)
        tags_only = await verify_table(store, files=False)
    assert not files_only.ok and files_only.commits is None
    assert tags_only.ok and tags_only.files is None and tags_only.commits == ()
    async with LocalStore(tampered) as store:
        files_only = await verify_table(store, tags=False)
        tags_only = await verify_table(store, files=False)
    assert files_only.ok and files_only.commits is None
    assert not tags_only.ok and tags_only.files is None


async def test_a_partly_tagged_compaction_verifies_its_tagged_sources(
    make: Callable[..., RaceTable],
) -> None:
    """Another engine's compaction that tagged two of its three sources: each tagged run is
    checked on its own, the untagged source is reported as not checked, and the table
    verifies (the runs need not tile an output not every source of which is tagged)."""
    table = make()
    version = await databricks_optimize(table, [0, ROWS, 2 * ROWS], tagged=2)
    async with table.store() as store:
        report = await verify_table(store)
    (check,) = report.commits or ()
    assert report.ok, report
    assert (check.version, check.status, check.sources_checked, check.sources_untagged) == (
        version,
        "ok",
        2,
        1,
    )
    (note,) = check.notes
    assert note.endswith(
        f": {ROWS} of its {3 * ROWS} rows are in no tagged run (untagged sources): not checked"
    )
    out = io.StringIO()
    print_verify(report, out)
    assert "2 sources checked, 0 skipped, 1 untagged (not checked)" in out.getvalue()


@pytest.mark.parametrize("tagged", [None, 2], ids=["every source tagged", "partly tagged"])
async def test_a_misplaced_run_fails_whether_or_not_every_source_is_tagged(
    tmp_path: Path, tagged: int | None
) -> None:
    """The second source's run moved one row on: its rows differ from the output's there,
    partly tagged or not; only a fully tagged output must tile, so only there is the hole
    before it a problem too."""
    table = local_table(tmp_path)
    version = await databricks_optimize(table, [0, ROWS, 2 * ROWS], tagged=tagged)

    def shift(remove: dict[str, Any]) -> None:
        tags = remove.get("tags") or {}
        if (
            "compactionInfo" in tags
            and json.loads(tags["compactionInfo"])[0]["rowOffsetInTarget"] == ROWS
        ):
            tags["compactionInfo"] = json.dumps(
                [{"rowOffsetInTarget": ROWS + 1, "sourceNumPhysicalRecords": ROWS}]
            )

    _rewrite(tmp_path, version, shift, kind="remove")
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store, files=False)
    (check,) = report.commits or ()
    assert check.status == "FAILED"
    assert any(
        f"differs from output rows [{ROWS + 1}, {2 * ROWS + 1})" in p for p in check.problems
    )
    assert any("(a gap)" in p for p in check.problems) == (tagged is None), check.problems


class _CountingStore:
    """A store passing every call to a real one, counting the HEADs and the GETs of data in
    flight at once."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self.heads = self.gets = self.in_flight = self.most_in_flight = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def head(self, key: str) -> ObjectMeta:
        self.heads += 1
        return await self._counted(self._store.head(key))

    async def get(self, key: str, **kw: int | None) -> bytes | bytearray:
        if "_delta_log/" in key:  # the snapshot's load, before any file is checked
            return await self._store.get(key, **kw)
        self.gets += 1
        return await self._counted(self._store.get(key, **kw))

    async def _counted(self, request: Awaitable[T]) -> T:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await anyio.lowlevel.checkpoint()  # let the other workers run their requests
            return await request
        finally:
            self.in_flight -= 1


async def test_file_checks_keep_to_the_concurrency_bound(
    tmp_path: Path, open_table: Opener
) -> None:
    """However many live files, at most ``concurrency`` HEADs are in flight, one per file."""
    for i in range(30):
        append(tmp_path, batch(i * 5, 5))
    async with open_table(tmp_path) as store:
        counting = _CountingStore(store)
        report = await verify_table(counting, tags=False, concurrency=4)  # type: ignore[arg-type]
    assert report.ok and counting.heads == 30
    assert 1 <= counting.most_in_flight <= 4


async def test_an_output_compacted_again_and_vacuumed_is_skipped(tmp_path: Path) -> None:
    """Once a second compaction and VACUUM removed the first compaction's output too, both
    commits are skipped, nothing fails, and the files half still checks the live output."""
    await _compacted_and_vacuumed(tmp_path)
    for i in range(3):
        append(tmp_path, batch(1000 + i * 10, 10))
    async with LocalStore(tmp_path) as store:
        assert (await compact_table(store, POLICY)).files_removed == 4
    deltalake.DeltaTable(str(tmp_path)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    async with LocalStore(tmp_path) as store:
        report = await verify_table(store)
    assert report.ok, report
    assert report.files is not None and report.files.files == 1
    assert report.commits is not None
    old, new = report.commits
    assert (old.status, old.outputs_skipped, old.sources_unchecked) == ("skipped", 1, 4)
    assert (new.status, new.sources_checked, new.sources_skipped) == ("skipped", 0, 4)


async def test_an_old_output_gone_alone_is_what_verify_says_is_gone(tmp_path: Path) -> None:
    """When only an old compaction's output is gone from storage (its sources are there), the
    report says the output is gone and its sources were not checked for want of it, never
    that the sources are gone."""
    for i in range(4):
        append(tmp_path, batch(i * 10, 10))
    async with LocalStore(tmp_path) as store:
        first = await compact_table(store, POLICY)
        for i in range(3):
            append(tmp_path, batch(1000 + i * 10, 10))
        assert (await compact_table(store, POLICY)).files_removed == 4
        (output,) = [b.path for b in first.committed]
        assert output is not None
        (tmp_path / output).unlink()  # a partial clean-up removed it, and nothing else
        report = await verify_table(store)
    assert report.ok, report
    assert report.commits is not None
    old = report.commits[0]
    assert (old.status, old.outputs_skipped, old.sources_skipped, old.sources_unchecked) == (
        "skipped",
        1,
        0,
        4,
    )
    out = io.StringIO()
    print_verify(report, out)
    line = next(x for x in out.getvalue().splitlines() if x.startswith(f"  version {old.version}:"))
    assert line == (
        f"  version {old.version}: skipped: 1 outputs (1 gone from storage), 0 sources checked, "
        "0 skipped, 4 not checked (their output is gone from storage)"
    )


async def test_an_absolute_path_dv_is_checked_like_a_relative_one(tmp_path: Path) -> None:
    """A DV named by absolute path (storage type ``p``) is read and checked: it verifies while
    its file is there and fails, naming the file, once it is gone."""
    version, paths = await _table_with_dvs(tmp_path)
    (dv_file,) = _dv_files(tmp_path)

    def absolute(add: dict[str, Any]) -> None:
        if "deletionVector" in add:
            dv = add["deletionVector"]
            dv["storageType"], dv["pathOrInlineDv"] = "p", dv_file.as_uri()

    _rewrite(tmp_path, version, absolute)
    async with LocalStore(tmp_path) as store:
        assert (await verify_table(store)).ok
        dv_file.unlink()
        report = await verify_table(store)
    assert _problems(report) == sorted(
        f"{p}: deletion vector file {dv_file.name} is missing" for p in paths
    )


class _RefusingStore(_CountingStore):
    """A store whose HEADs are refused (as by an IAM policy), after the first few."""

    async def head(self, key: str) -> ObjectMeta:
        if self.heads >= 3:
            raise StorageError("access denied", operation="head", key=key)
        return await super().head(key)


async def test_a_refused_head_is_a_storage_error_not_a_problem(tmp_path: Path) -> None:
    """Storage refusing a HEAD is not a finding about the table: verify raises the store's
    own error (the CLI's exit 4), not a group of them and not a problem line."""
    for i in range(10):
        append(tmp_path, batch(i * 5, 5))
    async with LocalStore(tmp_path) as store:
        with pytest.raises(StorageError, match="access denied"):
            await verify_table(_RefusingStore(store), tags=False)  # type: ignore[arg-type]


# --deep: every live file read in full (rlcd.operations._verify_deep)


def _rewrite_uncompressed(path: Path, *, page_crcs: bool) -> list[str]:
    """Rewrite every data file of the unpartitioned, append-only table at ``path`` with
    pyarrow, the same rows uncompressed and without dictionaries (a flipped value byte still
    decodes), with or without page checksums; the adds get the new sizes. The files' paths,
    sorted."""
    sizes = {}
    for file in path.glob("*.parquet"):
        pq.write_table(
            pq.read_table(file),
            file,
            compression="none",
            use_dictionary=False,
            write_page_checksum=page_crcs,
        )
        sizes[file.name] = file.stat().st_size

    def resize(add: dict[str, Any]) -> None:
        add["size"] = sizes[add["path"]]

    for log in (path / "_delta_log").glob("*.json"):
        _rewrite(path, int(log.stem), resize)
    return sorted(sizes)


async def _deep(store: ObjectStore, **kw: Any) -> list[str]:
    """The problems a deep verify finds, having checked that it read every file there."""
    report = await verify_table(store, deep=True, **kw)
    assert report.files is not None and report.files.read is not None
    return _problems(report)


async def test_a_flipped_byte_in_a_checksummed_page_is_found(
    tmp_path: Path, open_table: Opener
) -> None:
    """A byte flipped inside a data page whose writer stored its CRC passes the plain verify
    (the size holds) and fails --deep, naming the file, the row group and the column."""
    unpartitioned(tmp_path)
    victim = _rewrite_uncompressed(tmp_path, page_crcs=True)[2]
    column = flip_page_byte(tmp_path / victim)
    async with open_table(tmp_path) as store:
        assert (await verify_table(store)).ok
        (problem,) = await _deep(store)
    assert problem.startswith(
        f"{victim}: data does not read: row group 0, column {column} does not decode: "
    )
    assert "CRC checksum verification failed" in problem


async def test_a_flipped_value_byte_in_a_page_without_a_crc_is_not_found(tmp_path: Path) -> None:
    """The limit --deep documents: a value changed in an uncompressed page without a CRC still
    decodes (to another value), so nothing can tell."""
    unpartitioned(tmp_path)
    victim = tmp_path / _rewrite_uncompressed(tmp_path, page_crcs=False)[2]
    before = pq.read_table(victim)
    flip_page_byte(victim)
    assert not pq.read_table(victim).equals(before)  # a value changed, and it still decodes
    async with LocalStore(tmp_path) as store:
        assert await _deep(store) == []


async def test_a_truncated_file_is_found(tmp_path: Path, open_table: Opener) -> None:
    """A file cut short fails --deep as unreadable, whether or not its add says the short
    size (then only the deep read can tell)."""
    unpartitioned(tmp_path)
    async with LocalStore(tmp_path) as store:
        short, cut = list((await load_snapshot(store)).files.values())[1:3]
    for add in (short, cut):
        with (tmp_path / add.path).open("r+b") as f:
            f.truncate(add.size - 100)

    def shorten(add: dict[str, Any]) -> None:
        if add["path"] == short.path:
            add["size"] -= 100

    for log in (tmp_path / "_delta_log").glob("*.json"):
        _rewrite(tmp_path, int(log.stem), shorten)
    async with open_table(tmp_path) as store:
        problems = await _deep(store)
    found = {
        add.path: [p.removeprefix(f"{add.path}: ") for p in problems if p.startswith(add.path)]
        for add in (short, cut)
    }
    unreadable = "data does not read: not a readable Parquet file: "
    (alone,) = found[short.path]
    assert alone.startswith(unreadable)
    size, data = found[cut.path]
    assert size == f"is {cut.size - 100} bytes on storage, its add says {cut.size}"
    assert data.startswith(unreadable)
    assert len(problems) == 3


async def test_a_stats_row_count_other_than_the_footer_is_found(tmp_path: Path) -> None:
    """A file whose rows are not the ``numRecords`` its stats say fails --deep (the plain
    verify trusts the stats)."""
    unpartitioned(tmp_path)
    async with LocalStore(tmp_path) as store:
        add = next(iter((await load_snapshot(store)).files.values()))

    def miscount(action: dict[str, Any]) -> None:
        if action["path"] == add.path:
            stats = json.loads(action["stats"])
            stats["numRecords"] += 1
            action["stats"] = json.dumps(stats)

    for log in (tmp_path / "_delta_log").glob("*.json"):
        _rewrite(tmp_path, int(log.stem), miscount)
    async with LocalStore(tmp_path) as store:
        assert (await verify_table(store)).ok
        assert await _deep(store) == [
            f"{add.path}: data does not read: has 100 rows, its stats say 101"
        ]


async def test_a_flipped_byte_in_a_dv_file_is_found_by_deep_too(tmp_path: Path) -> None:
    """--deep checks every DV as the plain verify does: a flipped byte fails its CRC-32."""
    _, paths = await _table_with_dvs(tmp_path)
    (dv_file,) = _dv_files(tmp_path)
    data = bytearray(dv_file.read_bytes())
    data[1 + 4 + 6] ^= 0x01  # inside the first DV's bitmap
    dv_file.write_bytes(bytes(data))
    async with LocalStore(tmp_path) as store:
        (problem,) = await _deep(store)
    assert problem.startswith(f"{paths[0]}: deletion vector ") and "CRC-32 mismatch" in problem


@pytest.mark.parametrize(
    "name",
    [
        "basic-dv-no-checkpoint",
        "basic-dv-with-checkpoint",
        "dv-with-columnmapping",
        "krs-table-with-dv-small",
        "krs-with-short-dv",
    ],
)
async def test_clean_fixture_tables_with_dvs_pass_deep(tmp_path: Path, name: str) -> None:
    """Spark's and the kernel's DV tables read in full, with every DV, without a problem."""
    shutil.copytree(fixture_table(name), tmp_path / name)
    async with LocalStore(tmp_path / name) as store:
        report = await verify_table(store, deep=True)
    assert report.ok, report
    assert report.files is not None and report.files.read == report.files.files > 0
    assert report.files.dvs > 0


async def test_a_table_rlcd_compacted_passes_deep(tmp_path: Path, open_table: Opener) -> None:
    """rlcd's own outputs, from sources with DVs, read in full without a problem."""
    await _table_with_dvs(tmp_path)
    for i in range(3):
        append(tmp_path, batch(1000 + i * 10, 10))
    async with LocalStore(tmp_path) as store:
        assert (await compact_table(store, POLICY)).committed_version is not None
    async with open_table(tmp_path) as store:
        report = await verify_table(store, deep=True, concurrency=2)
    assert report.ok, report
    assert report.files is not None and report.files.read == report.files.files == 1


async def test_deep_checks_keep_to_the_concurrency_bound(
    tmp_path: Path, open_table: Opener
) -> None:
    """A deep verify reads every file, with at most ``concurrency`` requests in flight (on S3
    a HEAD and a GET a file; a local file is read in place), and reports progress after each."""
    for i in range(12):
        append(tmp_path, batch(i * 5, 5))
    seen: list[tuple[int, int]] = []
    async with open_table(tmp_path) as store:
        counting = _CountingStore(store)
        report = await verify_table(
            counting,  # type: ignore[arg-type]
            tags=False,
            deep=True,
            concurrency=3,
            on_file=lambda done, total: seen.append((done, total)),
        )
    assert report.ok and report.files is not None and report.files.read == 12
    assert counting.heads == 12 and 1 <= counting.most_in_flight <= 3
    assert seen == [(done, 12) for done in range(13)]
