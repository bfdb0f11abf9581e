"""Property: the snapshot rlcd builds from a checkpoint equals the one from replaying all JSON.

Tables are built by real writers: delta-rs appends, deletes (copy-on-write) and checkpoints, and
rlcd's own DV deletes, in a random order drawn by hypothesis.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
import deltalake
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlcd.delta.load import load_snapshot
from rlcd.delta.replay import Snapshot
from rlcd.operations._dv_writer import delete_rows
from rlcd.storage import LocalStore
from tests.integration.tables import checkpoint_and_json_snapshots

pytestmark = pytest.mark.integration

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 20)),
        st.tuples(st.just("cow_delete"), st.integers(0, 99)),
        st.tuples(st.just("dv_delete"), st.integers(0, 30)),
        st.tuples(st.just("checkpoint"), st.just(0)),
    ),
    min_size=1,
    max_size=12,
).filter(lambda ops: any(op == "checkpoint" for op, _ in ops))


def _essence(snap: Snapshot) -> dict[str, Any]:
    files = {
        p: (a.dv_unique_id, a.size, dict(a.partition_values), a.num_records)
        for p, a in snap.files.items()
    }
    return {
        "version": snap.version,
        "files": files,
        "protocol": snap.protocol,
        "metadata": snap.metadata,
        "txns": dict(snap.txns),
    }


async def _apply(path: Path, ops: list[tuple[str, int]]) -> None:
    next_id = 0
    deltalake.write_deltalake(
        str(path),
        pa.table({"id": pa.array([], pa.int64())}),
        configuration={"delta.enableDeletionVectors": "true"},
    )
    for op, n in ops:
        if op == "append":
            ids = pa.array(range(next_id, next_id + n), pa.int64())
            deltalake.write_deltalake(str(path), pa.table({"id": ids}), mode="append")
            next_id += n
        elif op == "cow_delete":
            deltalake.DeltaTable(str(path)).delete(f"id % 100 = {n}")
        elif op == "checkpoint":
            deltalake.DeltaTable(str(path)).create_checkpoint()
        else:
            async with LocalStore(path) as store:
                snap = await load_snapshot(store)
                targets = {
                    p: [n % a.num_records] for p, a in list(snap.files.items())[:2] if a.num_records
                }
                if targets:
                    await delete_rows(store, snap, targets)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_checkpoint_replay_equals_json_replay(ops: list[tuple[str, int]]) -> None:
    """Whatever the history, checkpoint + tail equals the full JSON replay."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        anyio.run(_apply, path, ops)
        from_checkpoint, from_json = anyio.run(checkpoint_and_json_snapshots, path)
    assert _essence(from_checkpoint) == _essence(from_json)
