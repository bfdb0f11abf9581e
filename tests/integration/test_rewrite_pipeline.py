"""The rewrite's two ways in and out, and how it stops.

A local store's sources are opened in place and its output file is written by pyarrow itself;
any other store goes through fetched bytes (or spill files) and the streaming upload. Both give
the same file, stats and runs. A failed upload, a missing source and a cancellation stop every
stage (no thread left waiting) and leave no output, temp file or spill file behind.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlcd.compaction.compact import rewrite_settings
from rlcd.compaction.plan import Bin, plan_bins
from rlcd.compaction.policy import CompactionPolicy
from rlcd.compaction.rewrite import RewriteSettings, RewrittenBin, rewrite_bin
from rlcd.delta.load import load_snapshot, table_config
from rlcd.errors import MissingDataFileError, StorageError
from rlcd.storage import LocalStore
from rlcd.storage._multipart import MultipartWriter
from rlcd.storage.base import ObjectMeta
from tests.integration.tables import append, batch

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

POLICY = CompactionPolicy(target_file_size=512 * 1024 * 1024)


class Remote:
    """The same objects as a local store, but not a :class:`LocalStore`: the rewrite takes
    the paths it takes for S3. ``fail_writes`` makes the n-th write of an upload fail."""

    def __init__(self, inner: LocalStore, fail_writes: int | None = None) -> None:
        self._inner = inner
        self._fail_writes = fail_writes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def local_files(self) -> None:
        """Not local: the rewrite must take its remote paths."""

    def open_writer(self, key: str) -> MultipartWriter:
        writer = self._inner.open_writer(key)
        if self._fail_writes is None:
            return writer
        real, calls = writer.write, [0]

        async def write(data: bytes) -> None:
            calls[0] += 1
            if calls[0] >= self._fail_writes:
                raise StorageError("connection reset", operation="write", key=key)
            await real(data)

        writer.write = write  # type: ignore[method-assign]
        return writer


STAGES = ["split", "one-thread"]
"""How a bin runs its stages: split over two threads, or in one."""


def _stages(stages: str) -> dict[str, Any]:
    return {"split": stages == "split"}


def _small_table(path: Path) -> None:
    for i in range(3):
        append(path, batch(i * 1000, 1000))


def _big_table(path: Path) -> None:
    """Two files whose output is several MiB of incompressible values: many upload chunks."""
    rng = np.random.default_rng(7)
    for i in range(2):
        append(
            path,
            pa.table(
                {
                    "id": pa.array(np.arange(i, 1_000_000 + i)),
                    "noise": pa.array(rng.integers(0, 2**62, 1_000_000)),
                }
            ),
        )


async def _plan(store: Any) -> tuple[Bin, RewriteSettings]:
    snap = await load_snapshot(store)
    config = table_config(snap)
    (bin_,) = plan_bins(snap, config, POLICY)
    return bin_, rewrite_settings(snap, config, POLICY)


@pytest.fixture(autouse=True)
def _own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spilled sources go to this test's own temp dir: with tests in parallel, another test's
    spills in the shared one would look like this test's leftovers."""
    own = tmp_path.parent / f"{tmp_path.name}-tmp"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))


def _leftovers(path: Path) -> list[Path]:
    temp = [p for p in path.rglob("*") if p.name.endswith(".rlcd-tmp")]
    return temp + list(Path(tempfile.gettempdir()).glob("rlcd-source-*"))


def _outputs(path: Path) -> set[str]:
    return {p.name for p in path.glob("*.zstd.parquet")}


@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("spill", [False, True])
async def test_local_and_remote_paths_write_the_same_file(
    tmp_path: Path, spill: bool, stages: str
) -> None:
    """In-place reads and pyarrow's own file give what fetched (or spilled) bytes and the
    streaming upload give, and a split bin what a one-thread bin gives: same rows in the same
    order, same stats, same runs."""
    _small_table(tmp_path)
    async with LocalStore(tmp_path) as store:
        bin_, settings = await _plan(store)
        local = await rewrite_bin(store, bin_, settings)
        if spill:
            settings = dataclasses.replace(
                settings, read=dataclasses.replace(settings.read, spill_threshold=1)
            )
        remote = await rewrite_bin(Remote(store), bin_, settings, **_stages(stages))  # type: ignore[arg-type]
    assert local.key and remote.key and local.key != remote.key
    assert pq.read_table(tmp_path / local.key).equals(pq.read_table(tmp_path / remote.key))
    assert (local.stats, local.runs, local.offsets, local.rows) == (
        remote.stats,
        remote.runs,
        remote.offsets,
        remote.rows,
    )
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
async def test_a_split_bin_writes_the_one_thread_bins_bytes(tmp_path: Path, remote: bool) -> None:
    """A split bin encodes each row group in two parts at once: byte for byte the file a
    one-thread bin writes."""
    _small_table(tmp_path)
    async with LocalStore(tmp_path) as store:
        bin_, settings = await _plan(store)
        settings = dataclasses.replace(settings, row_group_rows=400)
        target = Remote(store) if remote else store
        one = await rewrite_bin(target, bin_, settings, split=False)  # type: ignore[arg-type]
        two = await rewrite_bin(target, bin_, settings, split=True)  # type: ignore[arg-type]
    assert pq.read_metadata(tmp_path / two.key).num_row_groups == 3
    assert (tmp_path / one.key).read_bytes() == (tmp_path / two.key).read_bytes()
    assert (one.stats, one.runs, one.offsets, one.rows) == (
        two.stats,
        two.runs,
        two.offsets,
        two.rows,
    )


@pytest.mark.parametrize("stages", STAGES)
async def test_failed_upload_stops_the_bin_and_leaves_nothing(tmp_path: Path, stages: str) -> None:
    """The store fails while the encoder still has chunks to hand over: the bin fails with
    the store's error, every stage stops, and the upload is aborted."""
    _big_table(tmp_path)
    before = _outputs(tmp_path)
    async with LocalStore(tmp_path) as store:
        bin_, settings = await _plan(store)
        with anyio.fail_after(60), pytest.raises(StorageError, match="connection reset"):
            await rewrite_bin(Remote(store, fail_writes=2), bin_, settings, **_stages(stages))  # type: ignore[arg-type]
    assert _outputs(tmp_path) == before
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("remote", [False, True])
async def test_missing_source_fails_the_bin_and_leaves_nothing(
    tmp_path: Path, remote: bool, stages: str
) -> None:
    _small_table(tmp_path)
    before = _outputs(tmp_path)
    async with LocalStore(tmp_path) as store:
        bin_, settings = await _plan(store)
        (tmp_path / bin_.sources[-1].path).unlink()
        target: Any = Remote(store) if remote else store
        with anyio.fail_after(60), pytest.raises(MissingDataFileError):
            await rewrite_bin(target, bin_, settings, **_stages(stages))
    assert _outputs(tmp_path) == before - {bin_.sources[-1].path}
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("remote", [False, True])
@pytest.mark.parametrize("after", [0.0, 0.05, 0.3])
async def test_cancelled_bin_stops_promptly_and_leaves_nothing(
    tmp_path: Path, remote: bool, after: float, stages: str
) -> None:
    """Cancelled at any point (before the threads start, while decoding, while uploading),
    the bin returns soon, with no thread left behind and nothing written."""
    _big_table(tmp_path)
    before = _outputs(tmp_path)
    async with LocalStore(tmp_path) as store:
        bin_, settings = await _plan(store)
        # remotely, sources are spilled to temp files, which must go too
        settings = dataclasses.replace(
            settings, read=dataclasses.replace(settings.read, spill_threshold=1)
        )
        target: Any = Remote(store) if remote else store
        done: list[RewrittenBin] = []
        started = time.monotonic()
        with anyio.move_on_after(after):
            done.append(await rewrite_bin(target, bin_, settings, **_stages(stages)))
        assert time.monotonic() - started < after + 10
    if not done:  # finished before the deadline on a fast machine: nothing to check
        assert _outputs(tmp_path) == before
    assert not _leftovers(tmp_path)


async def _fail_inside(writer: Any) -> None:
    async with writer as out:
        Path(out.path).write_bytes(b"partial")
        raise KeyError("encoder failed")


async def test_local_file_writer_publishes_or_leaves_nothing(tmp_path: Path) -> None:
    """The local store's file writer: bytes written to its temp file, natively or through
    ``write``, appear at the key on completion; an exception or abort removes the temp file."""
    async with LocalStore(tmp_path) as store:
        async with store.open_file_writer("dir/a.bin") as out:
            Path(out.path).write_bytes(b"native ")
            await out.write(b"and streamed")
        assert (tmp_path / "dir" / "a.bin").read_bytes() == b"native and streamed"
        with pytest.raises(KeyError):
            await _fail_inside(store.open_file_writer("dir/b.bin"))
        async with store.open_file_writer("dir/c.bin") as out:
            await out.abort()
        meta = await store.head("dir/a.bin")
    assert meta == ObjectMeta("dir/a.bin", 19, meta.last_modified_ms)
    assert sorted(p.name for p in (tmp_path / "dir").iterdir()) == ["a.bin"]


@pytest.mark.parametrize("stages", STAGES)
async def test_a_one_token_limiter_bounds_bins_not_stages(tmp_path: Path, stages: str) -> None:
    """Two bins under one token rewrite one after the other; neither deadlocks its stages."""
    _small_table(tmp_path)
    limiter = anyio.CapacityLimiter(1)
    async with LocalStore(tmp_path) as store:
        bin_, settings = await _plan(store)
        done: list[RewrittenBin] = []

        async def one() -> None:
            done.append(
                await rewrite_bin(store, bin_, settings, limiter=limiter, **_stages(stages))
            )

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(one)
                tg.start_soon(one)
    assert [d.rows for d in done] == [3000, 3000]
    assert limiter.borrowed_tokens == 0


@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("prefetch", [2, 3])
async def test_a_bin_holds_at_most_prefetch_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefetch: int, stages: str
) -> None:
    """Counting the source being decoded and the one the fetch task waits to hand over, a bin
    never holds more than ``prefetch`` fetched sources (their bytes or spill files)."""
    import rlcd.compaction.rewrite as rewrite

    for i in range(6):
        append(tmp_path, batch(i * 100, 100))
    held, peak = [0], [0]
    fetch, decoded = rewrite.fetch_source, rewrite.DecodedSource

    async def counting_fetch(*args: Any, **kwargs: Any) -> Any:
        fetched = await fetch(*args, **kwargs)
        held[0] += 1
        peak[0] = max(peak[0], held[0])
        close = fetched.close

        def counted_close() -> None:
            if not fetched._closed:
                held[0] -= 1
            close()

        fetched.close = counted_close  # type: ignore[method-assign]
        return fetched

    class SlowDecode(decoded):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            time.sleep(0.05)  # the fetch task runs ahead as far as it may
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(rewrite, "fetch_source", counting_fetch)
    monkeypatch.setattr(rewrite, "DecodedSource", SlowDecode)
    async with LocalStore(tmp_path) as store:
        bin_, settings = await _plan(store)
        settings = dataclasses.replace(settings, prefetch=prefetch)
        await rewrite_bin(Remote(store), bin_, settings, **_stages(stages))  # type: ignore[arg-type]
    assert peak[0] == prefetch and held[0] == 0
