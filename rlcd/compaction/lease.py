"""Holding a table's advisory lease while a run works on it: the IO of
:mod:`rlcd.compaction._lease_rules`, whose header explains the lease.

``rlcd compact`` and the daemon's compaction and cleanup of a table run inside
:func:`hold_lease`. It yields :class:`LeaseHold` when this run took the lease (renewed in the
background every third of the TTL, released at the end) or :class:`Busy` when another run holds
it (the caller skips the table). The lease is advisory: the log stays the only lock for
correctness, so a failure to renew or release is logged and the work goes on, and a lease lost
to a take-over (this run stalled past its TTL) is only noticed: renewals stop and the release
leaves the new holder's lease alone.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

import anyio
import structlog

from rlcd._tasks import primary_error
from rlcd.compaction._lease_rules import (
    LEASE_KEY,
    Busy,
    Create,
    Lease,
    Renew,
    Step,
    TakeOver,
    decide,
)
from rlcd.errors import NotFoundError, StorageError
from rlcd.storage.base import ObjectStore, PutResult, SwapResult, Versioned, Written

__all__ = (
    "LEASE_KEY",
    "DEFAULT_LEASE_TTL_S",
    "Busy",
    "Lease",
    "LeaseHold",
    "take_lease",
    "hold_lease",
    "owner",
)

log = structlog.get_logger(__name__)

DEFAULT_LEASE_TTL_S: Final = 60.0
"""How long a lease lasts unrenewed: how long a killed run keeps others off its table."""

_TAKE_ATTEMPTS: Final = 3
"""Reads and conditional writes before giving up on a lease that keeps changing hands."""
_RELEASE_TIMEOUT_S: Final = 10.0
_RENEW_TIMEOUT_S: Final = 10.0
"""How long one renewal may take; the end of a run waits for one under way that long."""


def owner(command: str) -> str:
    """Words naming this process for a lease's ``owner``: the command, pid and host."""
    return f"{command} (pid {os.getpid()} on {socket.gethostname()})"


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (signal 0 checks without sending)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


class LeaseHold:
    """A lease this run holds on one table; :func:`hold_lease` renews and releases it.

    ``lost`` turns True when a renewal finds the lease no longer ours (taken over after it
    expired, or deleted): renewals stop and the release leaves it alone.
    """

    def __init__(
        self, store: ObjectStore, lease: Lease, *, ttl_ms: int, now_ms: Callable[[], int]
    ) -> None:
        self.lease = lease
        self.lost = False
        self._store = store
        self._ttl_ms = ttl_ms
        self._now_ms = now_ms

    async def renew(self) -> None:
        """Extend the lease by the TTL, or find it lost (then do nothing more)."""
        if self.lost:
            return
        current = await _read(self._store)
        step = self._step(current)
        if isinstance(step, Renew) and current is not None:
            lease = step.lease.renewed(now_ms=self._now_ms(), ttl_ms=self._ttl_ms)
            result = await self._store.put_if_match(LEASE_KEY, lease.encode(), current.etag)
            if isinstance(result, Written):
                self.lease = lease
                return
        self.lost = True
        log.warning("lease_lost", table=self._store.root, holder=self.lease.holder)

    async def release(self) -> None:
        """Delete the lease if it is still ours (a lost one is another run's now)."""
        if self.lost:
            return
        current = await _read(self._store)
        if isinstance(self._step(current), Renew) and current is not None:
            await self._store.delete_if_match(LEASE_KEY, current.etag)

    async def keep(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Renew every third of the TTL until cancelled or lost; a renewal that fails is
        logged and tried again at the next tick.

        The cancellation waits for a renewal under way (at most :data:`_RENEW_TIMEOUT_S`): a
        write cut short on our side may still land on the store after the release read the
        lease, and the release's conditional delete would then miss it and leave the lease to
        keep other runs off the table until its TTL passes."""
        task_status.started()
        while not self.lost:
            await anyio.sleep(self._ttl_ms / 3000)
            with anyio.move_on_after(_RENEW_TIMEOUT_S, shield=True) as scope:
                try:
                    await self.renew()
                except StorageError as exc:
                    log.warning("lease_renew_failed", table=self._store.root, error=str(exc))
            if scope.cancelled_caught:
                log.warning("lease_renew_failed", table=self._store.root, error="timed out")

    def _step(self, current: Versioned | None) -> Step:
        found = None if current is None else current.data
        return decide(found, holder=self.lease.holder, now_ms=self._now_ms())


async def take_lease(
    store: ObjectStore,
    *,
    owner: str,
    ttl_s: float = DEFAULT_LEASE_TTL_S,
    now_ms: Callable[[], int] = _wall_ms,
) -> LeaseHold | Busy:
    """Take the table's lease (create it, or take over an expired one), or say who holds it.
    Nothing renews or releases it: :func:`hold_lease` does.

    Raises:
        ValueError: ``ttl_s`` is not positive.
        StorageError: the store failed.
    """
    if not ttl_s > 0:
        raise ValueError(f"a lease's TTL must be positive, got {ttl_s}")
    ttl_ms = max(1, round(ttl_s * 1000))
    holder = uuid.uuid4().hex
    host = socket.gethostname()
    step: Step = Create()
    for _ in range(_TAKE_ATTEMPTS):  # a lost race reads the lease again
        current = await _read(store)
        now = now_ms()
        found = None if current is None else current.data
        step = decide(found, holder=holder, now_ms=now, host=host, alive=_alive)
        lease = Lease.new(holder, owner, now_ms=now, ttl_ms=ttl_ms, host=host, pid=os.getpid())
        result: PutResult | SwapResult
        if isinstance(step, Create):
            result = await store.put_if_absent(LEASE_KEY, lease.encode())
        elif isinstance(step, TakeOver) and current is not None:
            result = await store.put_if_match(LEASE_KEY, lease.encode(), current.etag)
        else:
            break  # Busy (a fresh holder id is never Renew)
        if isinstance(result, Written):
            if isinstance(step, TakeOver):
                log.info("lease_taken_over", table=store.root, expired=step.expired.describe())
            return LeaseHold(store, lease, ttl_ms=ttl_ms, now_ms=now_ms)
    return step if isinstance(step, Busy) else Busy(None, "changing hands at every attempt")


@asynccontextmanager
async def hold_lease(
    store: ObjectStore,
    *,
    owner: str,
    ttl_s: float = DEFAULT_LEASE_TTL_S,
    now_ms: Callable[[], int] = _wall_ms,
) -> AsyncIterator[LeaseHold | Busy]:
    """The table's lease for the duration of the block: a :class:`LeaseHold` kept renewed and
    released on exit (even when cancelled), or :class:`Busy` when another run holds it.

    Raises:
        ValueError: ``ttl_s`` is not positive.
        StorageError: the store failed while taking the lease (renewing and releasing only
            log their failures).
    """
    taken = await take_lease(store, owner=owner, ttl_s=ttl_s, now_ms=now_ms)
    if isinstance(taken, Busy):
        yield taken
        return
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(taken.keep)
            try:
                yield taken
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise primary_error(group)  # noqa: B904 (the leaf keeps its own cause)
    finally:
        with anyio.move_on_after(_RELEASE_TIMEOUT_S, shield=True):
            try:
                await taken.release()
            except StorageError as exc:
                log.warning("lease_release_failed", table=store.root, error=str(exc))


async def _read(store: ObjectStore) -> Versioned | None:
    try:
        return await store.get_versioned(LEASE_KEY)
    except NotFoundError:
        return None
