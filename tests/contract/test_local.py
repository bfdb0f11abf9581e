"""What only the local backend has: temp files, directory walking, the thread limiter."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from rlcd.errors import NotFoundError, StorageError
from rlcd.storage import LocalStore, Written

pytestmark = pytest.mark.anyio

HEX = "0f3a" * 8


async def test_stray_temp_files_are_invisible(tmp_path: Path) -> None:
    """A crashed writer's temp file is never listed, and no key may take that form."""
    (tmp_path / "_delta_log").mkdir()
    (tmp_path / "_delta_log" / f".00001.json.{HEX}.rlcd-tmp").write_bytes(b"partial")
    (tmp_path / "_delta_log" / ".hidden").write_bytes(b"a real object")
    async with LocalStore(tmp_path) as store:
        assert [m.key async for m in store.list("")] == ["_delta_log/.hidden"]
        with pytest.raises(StorageError, match="form of a temp file"):
            await store.put(f"_delta_log/.x.{HEX}.rlcd-tmp", b"")


async def test_only_rlcd_temp_files_are_uploads(tmp_path: Path) -> None:
    """Only names of the exact temp form are pending uploads; abort_upload refuses any other
    file (another program's look-alike, or a temp file of another key) and leaves it."""
    (tmp_path / "p").mkdir()
    ours = tmp_path / "p" / f".a.parquet.{HEX}.rlcd-tmp"
    ours.write_bytes(b"partial")
    lookalikes = [tmp_path / "p" / n for n in (".a.parquet.rlcd-tmp", ".a.parquet.123.rlcd-tmp")]
    for path in lookalikes:
        path.write_bytes(b"someone else's")
    async with LocalStore(tmp_path) as store:
        uploads = [u async for u in store.list_uploads("")]
        assert [(u.key, u.upload_id, u.rlcd_named) for u in uploads] == [
            ("p/a.parquet", str(ours), True)
        ]
        assert uploads[0].initiated_ms == ours.stat().st_mtime_ns // 1_000_000
        for bogus in [*map(str, lookalikes), str(tmp_path / "p" / f".b.parquet.{HEX}.rlcd-tmp")]:
            with pytest.raises(StorageError, match="not a temp file of this key"):
                await store.abort_upload("p/a.parquet", bogus)
        await store.abort_upload("p/a.parquet", uploads[0].upload_id)
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == sorted(p.name for p in lookalikes)


async def test_listing_enters_only_directories_that_can_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing the log does not walk the data directories (an idle poll stays cheap)."""
    async with LocalStore(tmp_path) as store:
        for key in ("_delta_log/0.json", "p=1/a.parquet", "p=2/deep/b.parquet", "_delta_logs/x"):
            await store.put(key, b"")
        scanned: list[str] = []
        real_scandir = os.scandir

        def scandir(path: str) -> object:
            scanned.append(os.path.relpath(path, tmp_path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
        assert [m.key async for m in store.list("_delta_log/")] == ["_delta_log/0.json"]
        assert scanned == ["_delta_log"]
        scanned.clear()
        assert [m.key async for m in store.list("_delta_log")] == [
            "_delta_log/0.json",
            "_delta_logs/x",
        ]
        assert sorted(scanned) == [".", "_delta_log", "_delta_logs"]


async def test_symlinked_directories_are_not_followed(tmp_path: Path) -> None:
    """A symlink loop cannot make a listing endless."""
    async with LocalStore(tmp_path) as store:
        await store.put("a/x", b"x")
        (tmp_path / "a" / "loop").symlink_to(tmp_path, target_is_directory=True)
        assert [m.key async for m in store.list("")] == ["a/x"]


async def test_a_file_in_the_way_is_an_error_not_a_miss(tmp_path: Path) -> None:
    """Writing under a key that is a file fails as a StorageError, not a NotFoundError."""
    async with LocalStore(tmp_path) as store:
        await store.put("a", b"file")
        with pytest.raises(StorageError) as info:
            await store.put("a/b", b"x")
        assert not isinstance(info.value, NotFoundError)
        with pytest.raises(NotFoundError):
            await store.get("a/b")


async def test_thread_limiter_bounds_blocking_calls(tmp_path: Path) -> None:
    """With a one-token limiter, concurrent calls still all complete (one thread at a time)."""
    limiter = anyio.CapacityLimiter(1)
    results: list[object] = []
    async with LocalStore(tmp_path, limiter=limiter) as store:

        async def put(n: int) -> None:
            results.append(await store.put_if_absent("k", b"%d" % n))

        async with anyio.create_task_group() as tg:
            for n in range(10):
                tg.start_soon(put, n)
    assert sum(isinstance(r, Written) for r in results) == 1
    assert limiter.borrowed_tokens == 0


async def test_get_many_reads_whole_objects_as_get_does(tmp_path: Path) -> None:
    """``get_many`` gives each object whole, in the order asked; a missing key is the
    NotFoundError ``get`` raises, naming it; a malformed key is refused before any read."""
    async with LocalStore(tmp_path) as store:
        await store.put("log/1", b"one")
        await store.put("log/2", b"")
        files = store.local_files()
        assert await files.get_many(["log/2", "log/1"]) == [b"", b"one"]
        assert await files.get_many([]) == []
        with pytest.raises(NotFoundError) as info:
            await files.get_many(["log/1", "log/3", "log/4"])
        assert info.value.key == "log/3"
        with pytest.raises(NotFoundError):
            await files.get_many(["log"])  # a directory is no object
        with pytest.raises(StorageError):
            await files.get_many(["log/1", "../escape"])
