"""Compaction next to real concurrent writers, and with bad sources.

Each test makes the other writer commit after rlcd planned (so rlcd's put-if-absent of the
next version loses) and checks what the design promises: appends are retried past, a winner
that rewrote a source aborts only that bin and deletes its output, a corrupt or missing source
aborts only its bin, and no row is lost or duplicated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.compaction.compact import compact_table
from rlcd.compaction.plan import Bin
from rlcd.compaction.policy import CompactionPolicy
from rlcd.errors import TransientStorageError
from rlcd.operations.verify import verify_table
from rlcd.storage import LocalStore, ObjectMeta, PutResult
from tests.integration.tables import (
    append,
    batch,
    delta_rs_rows,
    kernel_rows,
    partitioned,
    rows_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

POLICY = CompactionPolicy(target_file_size=64 * 1024 * 1024)


def _data_files(path: Path) -> set[Path]:
    return {p for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}


async def test_append_during_compaction_both_land(tmp_path: Path) -> None:
    """A delta-rs append that wins the race is retried past: both commits land."""
    partitioned(tmp_path)
    expected = delta_rs_rows(tmp_path)

    def concurrent_append(_bins: Sequence[Bin]) -> None:
        append(tmp_path, batch(10_000, 7, part=["a"] * 7), partition_by=["part"])

    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, POLICY, on_plan=concurrent_append)
        assert (await verify_table(store)).ok
    assert report.committed_version == report.read_version + 2
    assert not report.failed
    expected.update(rows_of(batch(10_000, 7, part=["a"] * 7)))
    assert delta_rs_rows(tmp_path) == expected
    assert kernel_rows(tmp_path) == expected


async def test_delete_on_a_source_aborts_only_its_bin(tmp_path: Path) -> None:
    """A delta-rs DELETE rewriting a file of bin 'a' aborts that bin on a table without DVs
    (its run cannot be masked); bin 'b' commits."""
    partitioned(tmp_path)
    files_before = _data_files(tmp_path)

    def concurrent_delete(_bins: Sequence[Bin]) -> None:
        deltalake.DeltaTable(str(tmp_path)).delete("id = 0")  # id 0 is in partition a

    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, POLICY, on_plan=concurrent_delete)
        assert (await verify_table(store)).ok
    assert report.committed_version == report.read_version + 2
    (failure,) = report.failed
    assert failure.bin.partition_values == {"part": "a"}
    assert failure.reason.startswith("dvs_not_enabled: ") and "(DELETE)" in failure.reason
    (done,) = report.committed
    assert done.bin.partition_values == {"part": "b"}
    expected = [r for r in _rows_before(files_before) if r["id"] != 0]
    rows = delta_rs_rows(tmp_path)
    assert sum(rows.values()) == len(expected)
    assert kernel_rows(tmp_path) == rows
    # the aborted bin's output is gone: only the committed output and delta-rs's rewrite are new
    new_files = _data_files(tmp_path) - files_before
    assert len(new_files) == 2


def _rows_before(files: set[Path]) -> list[dict[str, object]]:
    return [r for f in files for r in pq.read_table(f).to_pylist()]


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
async def test_bad_source_aborts_its_bin_only(tmp_path: Path, damage: str) -> None:
    """A corrupt or missing source fails its bin with the file named; the other bin commits."""
    partitioned(tmp_path)
    expected_b = {k: v for k, v in delta_rs_rows(tmp_path).items() if ("part", "b") in k}
    victim = sorted((tmp_path / "part=a").glob("*.parquet"))[0]
    if damage == "corrupt":
        victim.write_bytes(b"PAR1 this is not parquet PAR1")
    else:
        victim.unlink()
    files_before = _data_files(tmp_path)
    async with LocalStore(tmp_path) as store:
        report = await compact_table(store, POLICY)
    (failure,) = report.failed
    assert failure.bin.partition_values == {"part": "a"}
    assert victim.name in failure.reason
    assert ("missing" if damage == "missing" else "Parquet") in failure.reason
    (done,) = report.committed
    assert done.bin.partition_values == {"part": "b"}
    assert len(_data_files(tmp_path) - files_before) == 1, "the failed bin left no output"
    # partition a is untouched: its files are all still live
    live = deltalake.DeltaTable(str(tmp_path)).file_uris()
    assert sum("part=a" in u for u in live) == 4
    # (readers cannot scan partition a any more: its file is damaged; prune it away)
    part_b = deltalake.DeltaTable(str(tmp_path)).scan(predicate="part = 'b'").read_all()
    assert rows_of(pa.table(part_b)) == expected_b


class LostResponseStore(LocalStore):
    """A store whose first commit put lands but answers with a transient error, as when the
    connection drops after S3 stored the object."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.failed = False

    async def put_if_absent(self, key: str, data: bytes) -> PutResult:
        result = await super().put_if_absent(key, data)
        if key.startswith("_delta_log/") and not self.failed:
            self.failed = True
            raise TransientStorageError("connection reset", operation="put_if_absent", key=key)
        return result


async def test_a_commit_whose_response_was_lost_is_recognised(tmp_path: Path) -> None:
    """The put landed but the store said it failed: rlcd finds its own commit (same bytes,
    same txnId) instead of reporting a failure or committing twice."""
    partitioned(tmp_path)
    async with LostResponseStore(tmp_path) as store:
        report = await compact_table(store, POLICY)
        assert store.failed
        assert (await verify_table(store)).ok
    assert report.committed_version == report.read_version + 1 and not report.failed
    assert not (tmp_path / "_delta_log" / f"{report.read_version + 2:020d}.json").exists()
    assert sum(delta_rs_rows(tmp_path).values()) == 400


class LaggingListStore(LocalStore):
    """A store whose listing lags behind the commits it has stored (as some S3-compatible
    stores' do): ``hidden`` keys exist for GET but are left out of LIST."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.hidden: set[str] = set()

    def list(self, prefix: str, *, start_after: str | None = None) -> AsyncIterator[ObjectMeta]:
        listed = super().list(prefix, start_after=start_after)

        async def visible() -> AsyncIterator[ObjectMeta]:
            async for meta in listed:
                if meta.key not in self.hidden:
                    yield meta

        return visible()


async def test_a_winner_the_listing_misses_is_still_classified(tmp_path: Path) -> None:
    """A DELETE wins the race, then an append lands that the listing shows while it still
    hides the DELETE: rlcd reads the winners by key, so the DELETE aborts its bin rather than
    being skipped (which would leave the source live next to the output: duplicated rows)."""
    partitioned(tmp_path)
    before = delta_rs_rows(tmp_path)
    expected = Counter({row: n for row, n in before.items() if dict(row)["id"] != 0})
    expected.update(rows_of(batch(10_000, 7, part=["b"] * 7)))

    async with LaggingListStore(tmp_path) as store:

        def delete_then_append(_bins: Sequence[Bin]) -> None:
            table = deltalake.DeltaTable(str(tmp_path))
            table.delete("id = 0")
            store.hidden.add(f"_delta_log/{table.version():020d}.json")
            append(tmp_path, batch(10_000, 7, part=["b"] * 7), partition_by=["part"])

        report = await compact_table(store, POLICY, on_plan=delete_then_append)
    (failure,) = report.failed
    assert failure.bin.partition_values == {"part": "a"} and "DELETE" in failure.reason
    assert delta_rs_rows(tmp_path) == expected
    assert kernel_rows(tmp_path) == expected
