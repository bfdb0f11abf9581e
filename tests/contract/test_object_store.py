"""The ObjectStore contract (rlcd/storage/base.py), one suite over the local and S3 backends."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import anyio
import pytest

from rlcd.errors import NotFoundError, StorageError
from rlcd.storage import MIN_PART_SIZE, AlreadyExists, ObjectMeta, ObjectStore, Written
from rlcd.storage.base import Mismatch
from tests.contract.support import Backend

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


async def keys(store: ObjectStore, prefix: str = "", start_after: str | None = None) -> list[str]:
    return [meta.key async for meta in store.list(prefix, start_after=start_after)]


async def test_get_whole_object_and_byte_ranges(backend: Backend) -> None:
    """``get`` returns the bytes, or the half-open range of them, clipped like a slice."""
    store = backend.store
    await store.put("dir/data.bin", b"0123456789")
    assert await store.get("dir/data.bin") == b"0123456789"
    assert await store.get("dir/data.bin", start=2, end=5) == b"234"
    assert await store.get("dir/data.bin", start=7) == b"789"
    assert await store.get("dir/data.bin", end=3) == b"012"
    assert await store.get("dir/data.bin", start=4, end=4) == b""
    assert await store.get("dir/data.bin", start=8, end=100) == b"89"
    assert await store.get("dir/data.bin", start=10) == b""
    assert await store.get("dir/data.bin", start=50, end=60) == b""


async def test_empty_object(backend: Backend) -> None:
    """A zero-byte object exists, has size 0 and reads as empty, whole or ranged."""
    meta = await backend.store.put("empty", b"")
    assert meta.size == 0
    assert await backend.store.get("empty") == b""
    assert await backend.store.get("empty", start=0, end=10) == b""


async def test_head_matches_what_put_returned(backend: Backend) -> None:
    """``put`` returns the object's metadata, the same that ``head`` and ``list`` report."""
    before_ms = time.time_ns() // 1_000_000
    written = await backend.store.put("a/b.json", b"{}\n")
    assert written == ObjectMeta("a/b.json", 3, written.last_modified_ms)
    # Server clocks have one-second resolution on S3; allow for it, not for slowness.
    assert written.last_modified_ms >= before_ms - 2_000
    assert await backend.store.head("a/b.json") == written
    assert [meta async for meta in backend.store.list("a/")] == [written]


@pytest.mark.parametrize("key", ["missing", "dir/missing.json"])
async def test_missing_object_is_not_found(backend: Backend, key: str) -> None:
    """``get`` (whole or ranged) and ``head`` of a missing key raise NotFoundError naming it."""
    await backend.store.put("dir/other", b"x")
    with pytest.raises(NotFoundError) as info:
        await backend.store.get(key)
    assert (info.value.operation, info.value.key) == ("get", key)
    with pytest.raises(NotFoundError):
        await backend.store.get(key, start=1, end=2)
    with pytest.raises(NotFoundError):
        await backend.store.get(key, start=1, end=1)
    with pytest.raises(NotFoundError) as info:
        await backend.store.head(key)
    assert (info.value.operation, info.value.key) == ("head", key)


async def test_a_directory_is_not_an_object(backend: Backend) -> None:
    """A key that is only a prefix of other keys is not an object."""
    await backend.store.put("dir/file", b"x")
    with pytest.raises(NotFoundError):
        await backend.store.get("dir")
    with pytest.raises(NotFoundError):
        await backend.store.head("dir")


TRICKY = ["a.x", "a/x", "a/y/z", "a0", "b", "part=x y/é%20.parquet", "é"]
"""Keys in byte order: '.' < '/' < '0', nesting, spaces, percent signs and non-ASCII."""


async def test_list_is_recursive_and_in_byte_order(backend: Backend) -> None:
    """Listing returns every object under the prefix, recursively, in ascending byte order."""
    for key in reversed(TRICKY):
        await backend.store.put(key, key.encode())
    assert await keys(backend.store) == TRICKY
    assert await keys(backend.store, "a") == ["a.x", "a/x", "a/y/z", "a0"]
    assert await keys(backend.store, "a/") == ["a/x", "a/y/z"]
    assert await keys(backend.store, "a/y") == ["a/y/z"]
    assert await keys(backend.store, "part=") == ["part=x y/é%20.parquet"]
    assert await keys(backend.store, "nothing/") == []
    for key in TRICKY:
        assert await backend.store.get(key) == key.encode()


async def test_list_starts_strictly_after_the_given_key(backend: Backend) -> None:
    """``start_after`` is exclusive and need not be an existing key."""
    for key in TRICKY:
        await backend.store.put(key, b"")
    assert await keys(backend.store, start_after="a/x") == TRICKY[2:]
    assert await keys(backend.store, start_after="a/") == TRICKY[1:]
    assert await keys(backend.store, "a", start_after="a/y/z") == ["a0"]
    assert await keys(backend.store, start_after="") == TRICKY
    assert await keys(backend.store, start_after="\U0010ffff") == []


async def test_list_of_a_missing_root_is_empty(backend: Backend) -> None:
    """Listing where nothing was ever written yields nothing (no error)."""
    assert await keys(backend.store) == []
    assert await keys(backend.store, "_delta_log/") == []


async def test_list_a_delta_log_across_pages(backend: Backend) -> None:
    """A log of 23 commits lists in order from any version, across list pages (S3 uses 7 keys
    a page here), including by a partial-name prefix."""
    names = [f"_delta_log/{version:020d}.json" for version in range(23)]
    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(backend.store.put, name, b"{}")
    await backend.store.put("part-0.parquet", b"PAR1")
    assert await keys(backend.store, "_delta_log/") == names
    assert await keys(backend.store, "_delta_log/", start_after=names[9]) == names[10:]
    assert await keys(backend.store, "_delta_log/0000000000000000001") == names[10:20]
    assert await keys(backend.store) == [*names, "part-0.parquet"]


async def test_put_replaces(backend: Backend) -> None:
    """``put`` creates, then replaces the whole object."""
    await backend.store.put("k", b"first version")
    meta = await backend.store.put("k", b"second")
    assert meta.size == 6
    assert await backend.store.get("k") == b"second"
    assert await keys(backend.store) == ["k"]


async def test_put_if_absent_writes_once(backend: Backend) -> None:
    """``put_if_absent`` writes a free key, then reports the key taken and changes nothing."""
    assert await backend.store.put_if_absent("_delta_log/1.json", b"ours") == Written(
        "_delta_log/1.json"
    )
    result = await backend.store.put_if_absent("_delta_log/1.json", b"theirs")
    assert result == AlreadyExists("_delta_log/1.json")
    assert await backend.store.get("_delta_log/1.json") == b"ours"


async def test_put_if_absent_is_idempotent(backend: Backend) -> None:
    """Putting the bytes the key already holds is Written again: a retry of a write that landed
    unheard must not look like a lost race."""
    assert await backend.store.put_if_absent("c.json", b"same") == Written("c.json")
    assert await backend.store.put_if_absent("c.json", b"same") == Written("c.json")
    assert await backend.store.put_if_absent("c.json", b"samE") == AlreadyExists("c.json")
    assert await backend.store.put_if_absent("c.json", b"same+") == AlreadyExists("c.json")


async def test_put_if_absent_race_has_exactly_one_winner(backend: Backend) -> None:
    """Twenty concurrent ``put_if_absent`` on one key: one Written, the object is its bytes."""
    results: dict[int, object] = {}

    async def attempt(writer: int) -> None:
        results[writer] = await backend.store.put_if_absent("_delta_log/7.json", b"w%d" % writer)

    async with anyio.create_task_group() as tg:
        for writer in range(20):
            tg.start_soon(attempt, writer)
    winners = [w for w, result in results.items() if isinstance(result, Written)]
    assert len(winners) == 1
    losers = [result for result in results.values() if isinstance(result, AlreadyExists)]
    assert len(losers) == 19
    assert await backend.store.get("_delta_log/7.json") == b"w%d" % winners[0]
    assert backend.leftovers() == []


async def test_conditional_writes_name_the_version_they_store(backend: Backend) -> None:
    """``put_if_absent`` and ``put_if_match`` return the ETag ``get_versioned`` then reads, and
    a swap changes it."""
    created = await backend.store.put_if_absent("_rlcd/lease", b"one")
    assert isinstance(created, Written)
    assert created.etag is not None
    first = await backend.store.get_versioned("_rlcd/lease")
    assert (first.data, first.etag) == (b"one", created.etag)
    swapped = await backend.store.put_if_match("_rlcd/lease", b"two", first.etag)
    assert isinstance(swapped, Written)
    second = await backend.store.get_versioned("_rlcd/lease")
    assert (second.data, second.etag) == (b"two", swapped.etag)
    assert second.etag != first.etag
    with pytest.raises(NotFoundError):
        await backend.store.get_versioned("_rlcd/none")


async def test_put_if_match_refuses_a_stale_or_missing_version(backend: Backend) -> None:
    """A swap against an ETag no longer stored, or a key never written, changes nothing; one
    whose bytes are already stored is Written again (its answer may have been lost)."""
    old = await backend.store.put_if_absent("_rlcd/lease", b"one")
    assert isinstance(old, Written)
    assert old.etag is not None
    await backend.store.put_if_match("_rlcd/lease", b"two", old.etag)
    assert await backend.store.put_if_match("_rlcd/lease", b"three", old.etag) == Mismatch(
        "_rlcd/lease"
    )
    assert await backend.store.put_if_match("_rlcd/lease", b"two", old.etag) == Written(
        "_rlcd/lease"
    )
    assert await backend.store.get("_rlcd/lease") == b"two"
    assert await backend.store.put_if_match("_rlcd/none", b"x", old.etag) == Mismatch("_rlcd/none")
    assert await keys(backend.store) == ["_rlcd/lease"]


async def test_put_if_match_race_has_exactly_one_winner(backend: Backend) -> None:
    """Twenty concurrent swaps from one version: one Written, the object is its bytes."""
    base = await backend.store.put_if_absent("_rlcd/lease", b"base")
    assert isinstance(base, Written)
    assert base.etag is not None
    etag = base.etag
    results: dict[int, object] = {}

    async def attempt(writer: int) -> None:
        results[writer] = await backend.store.put_if_match("_rlcd/lease", b"w%d" % writer, etag)

    async with anyio.create_task_group() as tg:
        for writer in range(20):
            tg.start_soon(attempt, writer)
    winners = [w for w, result in results.items() if isinstance(result, Written)]
    assert len(winners) == 1
    assert sum(isinstance(result, Mismatch) for result in results.values()) == 19
    assert await backend.store.get("_rlcd/lease") == b"w%d" % winners[0]
    assert backend.leftovers() == []


async def test_delete_if_match_deletes_only_that_version(backend: Backend) -> None:
    """A conditional delete leaves another version alone, removes its own, and finds a missing
    key gone already."""
    old = await backend.store.put_if_absent("_rlcd/lease", b"one")
    assert isinstance(old, Written)
    assert old.etag is not None
    new = await backend.store.put_if_match("_rlcd/lease", b"two", old.etag)
    assert isinstance(new, Written)
    assert new.etag is not None
    assert await backend.store.delete_if_match("_rlcd/lease", old.etag) is False
    assert await backend.store.get("_rlcd/lease") == b"two"
    assert await backend.store.delete_if_match("_rlcd/lease", new.etag) is True
    assert await keys(backend.store) == []
    assert await backend.store.delete_if_match("_rlcd/lease", new.etag) is True


async def test_delete_is_idempotent(backend: Backend) -> None:
    """``delete`` removes the object; deleting it again, or a key never written, succeeds."""
    await backend.store.put("d/x", b"x")
    await backend.store.delete("d/x")
    with pytest.raises(NotFoundError):
        await backend.store.head("d/x")
    await backend.store.delete("d/x")
    await backend.store.delete("never/written")
    assert await keys(backend.store) == []


async def test_writer_small_object_appears_on_complete(backend: Backend) -> None:
    """A small streamed object is invisible until the writer completes, then whole."""
    async with backend.store.open_writer("out/small.parquet") as writer:
        for chunk in (b"PAR1", b"-" * 1000, b"PAR1"):
            await writer.write(chunk)
        with pytest.raises(NotFoundError):
            await backend.store.head("out/small.parquet")
    assert await backend.store.get("out/small.parquet") == b"PAR1" + b"-" * 1000 + b"PAR1"
    assert backend.leftovers() == []


async def test_writer_multipart_object(backend: Backend) -> None:
    """A 12 MiB object written in uneven chunks goes out in parts and reads back exactly."""
    chunks = [bytes([n]) * (MiB + MiB // 2 + n) for n in range(8)]
    writer = backend.store.open_writer("out/big.parquet")
    async with writer:
        for chunk in chunks:
            await writer.write(chunk)
        with pytest.raises(NotFoundError):
            await backend.store.head("out/big.parquet")
        meta = await writer.complete()
    expected = b"".join(chunks)
    assert len(expected) > 2 * MIN_PART_SIZE
    assert meta == await backend.store.head("out/big.parquet")
    assert meta.size == len(expected)
    assert await backend.store.get("out/big.parquet") == expected
    middle = (MIN_PART_SIZE - 2, MIN_PART_SIZE + 2)  # across the first part boundary
    assert (
        await backend.store.get("out/big.parquet", start=middle[0], end=middle[1])
        == (expected[middle[0] : middle[1]])
    )
    assert backend.leftovers() == []


async def test_writer_aborts_on_exception(backend: Backend) -> None:
    """An exception inside the writer block leaves no object and no incomplete upload."""

    async def write_then_fail() -> None:
        async with backend.store.open_writer("out/failed.parquet") as writer:
            await writer.write(b"x" * (MIN_PART_SIZE + 1))  # a part is already out
            raise RuntimeError("encoder failed")

    with pytest.raises(RuntimeError, match="encoder failed"):
        await write_then_fail()
    with pytest.raises(NotFoundError):
        await backend.store.head("out/failed.parquet")
    assert await keys(backend.store) == []
    assert backend.leftovers() == []


async def test_writer_aborts_when_cancelled(backend: Backend) -> None:
    """A writer cancelled mid-stream still aborts its upload."""
    with anyio.CancelScope() as scope:
        async with backend.store.open_writer("out/cancelled.parquet") as writer:
            await writer.write(b"x" * (MIN_PART_SIZE + 1))
            scope.cancel()
            await anyio.sleep(5)
    assert scope.cancelled_caught
    assert await keys(backend.store) == []
    assert backend.leftovers() == []


async def test_writer_abort_is_idempotent_and_final(backend: Backend) -> None:
    """``abort`` may be repeated; afterwards the writer refuses writes and completion."""
    writer = backend.store.open_writer("out/aborted")
    await writer.write(b"x" * (MIN_PART_SIZE + 1))
    await writer.abort()
    await writer.abort()
    with pytest.raises(StorageError, match="completed or aborted"):
        await writer.write(b"more")
    with pytest.raises(StorageError, match="completed or aborted"):
        await writer.complete()
    assert await keys(backend.store) == []
    assert backend.leftovers() == []


async def test_writer_replaces_an_existing_object(backend: Backend) -> None:
    """Completing a writer replaces an object of the same key, like ``put``."""
    await backend.store.put("out/x", b"old")
    async with backend.store.open_writer("out/x") as writer:
        await writer.write(b"new")
    assert await backend.store.get("out/x") == b"new"


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "../escape", "a/../../b", "a/./b", "dir/"])
async def test_malformed_keys_are_refused(backend: Backend, key: str) -> None:
    """Keys must be relative paths of real names: nothing can escape the root."""
    with pytest.raises(StorageError, match="invalid key"):
        await backend.store.put(key, b"x")
    with pytest.raises(StorageError, match="invalid key"):
        await backend.store.get(key)
    with pytest.raises(StorageError, match="invalid key"):
        backend.store.open_writer(key)


async def test_bad_range_is_refused(backend: Backend) -> None:
    """A negative bound or an end before the start is a caller error, not a short read."""
    await backend.store.put("k", b"0123")
    with pytest.raises(StorageError, match="invalid range"):
        await backend.store.get("k", start=-1)
    with pytest.raises(StorageError, match="invalid range"):
        await backend.store.get("k", start=3, end=2)


async def test_closed_store_refuses_use(backend: Backend) -> None:
    """After ``aclose`` every operation fails clearly, without touching storage."""
    store = backend.store
    await store.put("k", b"x")
    writer = store.open_writer("w")
    await store.aclose()
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.get("k"),
        lambda: store.head("k"),
        lambda: store.put("k", b"y"),
        lambda: store.put_if_absent("k2", b"y"),
        lambda: store.delete("k"),
        writer.complete,
    ]
    for call in calls:
        with pytest.raises(StorageError, match="closed"):
            await call()
    with pytest.raises(StorageError, match="closed"):
        store.list("")
    with pytest.raises(StorageError, match="closed"):
        store.open_writer("w2")


async def _abandon(store: ObjectStore, key: str) -> None:
    """Start a write that sends a part and is never finished, as a killed process leaves it."""
    writer = store.open_writer(key)
    await writer.write(b"x" * (MIN_PART_SIZE + 1))


async def test_list_uploads_finds_abandoned_writes_and_abort_drops_them(backend: Backend) -> None:
    """A write never completed nor aborted is listed under its target key (by prefix) and not
    as an object; aborting it leaves nothing, twice, and keeps the object
    already at that key."""
    store = backend.store
    await store.put("out/a.parquet", b"committed")
    await _abandon(store, "out/a.parquet")
    await _abandon(store, "out/sub/b.parquet")
    await _abandon(store, "other/c.parquet")
    uploads = [u async for u in store.list_uploads("out/")]
    assert [u.key for u in uploads] == ["out/a.parquet", "out/sub/b.parquet"]
    assert all(isinstance(u.initiated_ms, int) for u in uploads)  # moto says 2010, always
    assert await keys(store) == ["out/a.parquet"]
    for upload in uploads:
        await store.abort_upload(upload.key, upload.upload_id)
        await store.abort_upload(upload.key, upload.upload_id)
    assert [u.key async for u in store.list_uploads("")] == ["other/c.parquet"]
    assert await store.get("out/a.parquet") == b"committed"
    (last,) = [u async for u in store.list_uploads("other/")]
    await store.abort_upload(last.key, last.upload_id)
    assert backend.leftovers() == []
