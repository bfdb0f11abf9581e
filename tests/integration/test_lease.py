"""The advisory table lease on both stores: one winner among racing runs, a killed holder's
lease taken over once its TTL passes, renewal, a lost lease noticed and left alone, and cleanup
that never touches ``_rlcd/``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from rlcd.compaction.cleanup import clean_table
from rlcd.compaction.lease import LEASE_KEY, Busy, Lease, LeaseHold, hold_lease, take_lease
from rlcd.delta.names import data_file_name
from rlcd.errors import NotFoundError
from rlcd.storage import ObjectStore, open_store
from rlcd.storage.base import SwapResult, Versioned
from tests.contract.support import moto_config
from tests.integration.tables import partitioned

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

TTL_S = 60.0
T = TypeVar("T")


@pytest.fixture(params=["local", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    """A table root on local disk or on moto's S3 (the lease needs no table in it)."""
    if request.param == "local":
        async with open_store(str(tmp_path / "t")) as local:
            yield local
        return
    endpoint: str = request.getfixturevalue("moto_endpoint")
    bucket: str = request.getfixturevalue("s3_bucket")
    async with open_store(f"s3://{bucket}/t", s3=moto_config(endpoint)) as s3:
        yield s3


class Clock:
    """Wall milliseconds that move only when a test moves them."""

    def __init__(self, ms: int = 1_000_000) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


class Stalling:
    """Delegates to ``inner``; between :meth:`stall` and :meth:`resume` the lease's reads and
    writes wait: the holder's process paused (a GC pause, a stopped VM), so its background
    renewal cannot run while the test's clock moves on and another run takes over."""

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self._resumed: anyio.Event | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def root(self) -> str:
        return self._inner.root

    def stall(self) -> None:
        self._resumed = anyio.Event()

    def resume(self) -> None:
        if self._resumed is not None:
            self._resumed.set()
        self._resumed = None

    async def get_versioned(self, key: str) -> Versioned:
        await self._running()
        return await self._inner.get_versioned(key)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> SwapResult:
        await self._running()
        return await self._inner.put_if_match(key, data, etag)

    async def _running(self) -> None:
        if self._resumed is not None:
            await self._resumed.wait()


class Wire:
    """Delegates to ``inner``; each conditional write is a request that takes ``latency_s``
    to land, in order, and lands even when its caller is cancelled meanwhile, as on a real
    network. ``sent`` is set once a write is on its way."""

    def __init__(self, inner: ObjectStore, requests: anyio.abc.TaskGroup, latency_s: float) -> None:
        self._inner = inner
        self._requests = requests
        self._latency_s = latency_s
        self.sent = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def root(self) -> str:
        return self._inner.root

    async def put_if_match(self, key: str, data: bytes, etag: str) -> SwapResult:
        return await self._send(lambda: self._inner.put_if_match(key, data, etag))

    async def delete_if_match(self, key: str, etag: str) -> bool:
        return await self._send(lambda: self._inner.delete_if_match(key, etag))

    async def _send(self, write: Callable[[], Awaitable[T]]) -> T:
        landed = anyio.Event()
        result: list[T] = []

        async def request() -> None:
            await anyio.sleep(self._latency_s)
            result.append(await write())
            landed.set()

        self._requests.start_soon(request)
        self.sent.set()
        await landed.wait()
        return result[0]


async def stored(store: ObjectStore) -> Lease:
    return Lease.parse(bytes(await store.get(LEASE_KEY)))


async def test_of_racing_runs_exactly_one_takes_the_lease(store: ObjectStore) -> None:
    """Ten runs taking a free lease at once: one holds it, nine are told who does."""
    results: list[LeaseHold | Busy] = []

    async def take(i: int) -> None:
        results.append(await take_lease(store, owner=f"run {i}", ttl_s=TTL_S))

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(take, i)
    holds = [r for r in results if isinstance(r, LeaseHold)]
    assert len(holds) == 1
    busy = [r for r in results if isinstance(r, Busy)]
    assert len(busy) == 9
    assert all(b.lease == holds[0].lease for b in busy)
    assert await stored(store) == holds[0].lease


async def test_of_racing_runs_exactly_one_takes_over_an_expired_lease(store: ObjectStore) -> None:
    """Ten runs finding one expired lease: one takes it over, the others see it live."""
    clock = Clock()
    dead = await take_lease(store, owner="killed", ttl_s=1.0, now_ms=clock)
    assert isinstance(dead, LeaseHold)
    clock.ms += 1_000
    results: list[LeaseHold | Busy] = []

    async def take(i: int) -> None:
        results.append(await take_lease(store, owner=f"run {i}", ttl_s=TTL_S, now_ms=clock))

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(take, i)
    holds = [r for r in results if isinstance(r, LeaseHold)]
    assert len(holds) == 1
    assert await stored(store) == holds[0].lease


async def test_a_killed_holders_lease_is_taken_over_once_its_ttl_passed(
    store: ObjectStore,
) -> None:
    """A run killed while holding the lease never releases it: the next run is turned away
    until the TTL passes, then takes the lease over."""
    clock = Clock()
    killed = await take_lease(store, owner="rlcd compact (killed)", ttl_s=5.0, now_ms=clock)
    assert isinstance(killed, LeaseHold)  # and never renewed nor released
    clock.ms += 4_999
    async with hold_lease(store, owner="next", ttl_s=TTL_S, now_ms=clock) as early:
        assert isinstance(early, Busy)
        assert early.describe().startswith("held by rlcd compact (killed) until ")
    assert await stored(store) == killed.lease
    clock.ms += 1
    async with hold_lease(store, owner="next", ttl_s=TTL_S, now_ms=clock) as late:
        assert isinstance(late, LeaseHold)
        assert await stored(store) == late.lease
    with pytest.raises(NotFoundError):
        await store.get(LEASE_KEY)


async def test_renewal_keeps_the_lease_while_the_run_lasts(store: ObjectStore) -> None:
    """The holder renews in the background: the stored lease's sequence and expiry move on,
    others stay turned away, and the lease is gone once the block ends."""
    clock = Clock()
    async with hold_lease(store, owner="long run", ttl_s=0.03, now_ms=clock) as held:
        assert isinstance(held, LeaseHold)
        with anyio.fail_after(30):
            while (await stored(store)).seq < 3:
                clock.ms += 10
                await anyio.sleep(0.01)
        assert (await stored(store)).expires_ms > held.lease.acquired_ms + 30
        assert isinstance(await take_lease(store, owner="other", now_ms=clock), Busy)
        assert not held.lost
    assert [m.key async for m in store.list("_rlcd/")] == []


async def test_a_holder_taken_over_stops_renewing_and_leaves_the_new_lease(
    store: ObjectStore,
) -> None:
    """A run that stalled past its TTL and was taken over notices at its next renewal: it
    stops renewing, and its release leaves the new holder's lease in place."""
    clock = Clock()
    holder = Stalling(store)
    async with hold_lease(holder, owner="stalled", ttl_s=0.03, now_ms=clock) as old:
        assert isinstance(old, LeaseHold)
        # The stall, with no await between its start and the clock's move: a renewal already
        # writing carries the old expiry (the take-over then reads again and still takes
        # over); any other waits, and finds the lease taken once the holder resumes.
        holder.stall()
        clock.ms += 60_000  # the lease expires in everyone's eyes
        new = await take_lease(store, owner="new", ttl_s=TTL_S, now_ms=clock)
        assert isinstance(new, LeaseHold)
        holder.resume()
        for _ in range(3000):  # the background renewal's next tick, within 30 s
            if old.lost:
                break
            await anyio.sleep(0.01)
        assert old.lost
        await old.renew()  # a lost lease is never written again
    assert await stored(store) == new.lease


async def test_a_run_ending_mid_renewal_still_releases_its_lease(store: ObjectStore) -> None:
    """The run ends while a renewal's write is on the wire: the end waits for it, so the
    release reads the renewed lease and deletes it (a renewal cancelled on our side would land
    after the release's read, its conditional delete would miss, and the lease would stay)."""
    async with anyio.create_task_group() as requests:
        wire = Wire(store, requests, latency_s=0.2)
        async with hold_lease(wire, owner="run", ttl_s=0.03, now_ms=Clock()) as held:
            assert isinstance(held, LeaseHold)
            await wire.sent.wait()
    assert [m.key async for m in store.list("_rlcd/")] == []


async def test_a_lease_renewed_by_its_holder_is_released_by_it(store: ObjectStore) -> None:
    """Renewals change the ETag; the release still finds the lease its own and deletes it."""
    clock = Clock()
    taken = await take_lease(store, owner="run", ttl_s=TTL_S, now_ms=clock)
    assert isinstance(taken, LeaseHold)
    for _ in range(3):
        clock.ms += 1_000
        await taken.renew()
    assert (await stored(store)).seq == 3
    await taken.release()
    assert [m.key async for m in store.list("")] == []


async def test_cleanup_never_removes_the_lease(tmp_path: Path) -> None:
    """Cleanup past any grace period deletes rlcd's orphan and keeps ``_rlcd/lease``."""
    table = tmp_path / "t"
    partitioned(table)
    orphan = table / data_file_name("zstd", os.urandom(16))
    orphan.write_bytes(b"orphan")
    async with open_store(str(table)) as store:
        taken = await take_lease(store, owner="run", ttl_s=TTL_S)
        assert isinstance(taken, LeaseHold)
        report = await clean_table(store, grace_s=0, now_ms=10**13)
        assert [m.key for m in report.deleted] == [orphan.name]
        assert await stored(store) == taken.lease
