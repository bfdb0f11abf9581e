"""``delete_many`` as the ObjectStore contract states it, on the local and S3 backends."""

from __future__ import annotations

import pytest

from rlcd.errors import StorageError
from rlcd.storage.base import DELETE_BATCH
from tests.contract.support import Backend

pytestmark = pytest.mark.anyio


async def test_delete_many_removes_the_keys_and_ignores_missing_ones(backend: Backend) -> None:
    """Listed keys go, keys never written succeed, other objects stay; the call repeats fine."""
    for key in ("a/1", "a/2", "b/3", "keep"):
        await backend.store.put(key, b"x")
    await backend.store.delete_many(["a/1", "b/3", "never/written", "a/2"])
    assert [m.key async for m in backend.store.list("")] == ["keep"]
    await backend.store.delete_many(["a/1", "b/3"])
    await backend.store.delete_many([])
    assert [m.key async for m in backend.store.list("")] == ["keep"]


async def test_delete_many_takes_a_full_batch_and_refuses_more(backend: Backend) -> None:
    """At most DELETE_BATCH keys a call (S3's DeleteObjects limit), on every backend; a bad
    key is refused before anything is deleted."""
    with pytest.raises(StorageError, match=f"at most {DELETE_BATCH}"):
        await backend.store.delete_many([f"k/{i}" for i in range(DELETE_BATCH + 1)])
    await backend.store.put("k/0", b"x")
    with pytest.raises(StorageError, match="invalid key"):
        await backend.store.delete_many(["k/0", "../escape"])
    assert [m.key async for m in backend.store.list("")] == ["k/0"]
    await backend.store.delete_many([f"k/{i}" for i in range(DELETE_BATCH)])
    assert [m.key async for m in backend.store.list("")] == []
