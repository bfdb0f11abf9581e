"""``enable_dv`` racing other writers: an append is retried past, a winner that changed the
metadata aborts it with nothing committed."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pytest

from rlcd.errors import ConcurrentModificationError, UnsupportedFeatureError
from rlcd.operations.enable_dv import enable_dv
from rlcd.storage import LocalStore
from tests.integration.races import HoldingStore
from tests.integration.tables import append, batch, delta_rs_rows

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_enable_dv_retries_past_an_append(tmp_path: Path) -> None:
    """An append landing first is no conflict: the upgrade commits after it, no row lost."""
    append(tmp_path, batch(0, 10))

    async def winner() -> None:
        append(tmp_path, batch(10, 10))

    async with LocalStore(tmp_path) as inner:
        plan = await enable_dv(HoldingStore(inner, [winner]), confirmed=True)
    assert plan.version == 2
    assert deltalake.DeltaTable(str(tmp_path)).protocol().min_reader_version == 3
    assert len(delta_rs_rows(tmp_path)) == 20


async def test_enable_dv_aborts_on_a_metadata_change(tmp_path: Path) -> None:
    """A winner that set a table property makes the upgrade commit nothing."""
    append(tmp_path, batch(0, 10))

    async def winner() -> None:
        deltalake.DeltaTable(str(tmp_path)).alter.set_table_properties(
            {"delta.logRetentionDuration": "interval 30 days"}
        )

    async with LocalStore(tmp_path) as inner:
        with pytest.raises(ConcurrentModificationError, match="metadata or protocol"):
            await enable_dv(HoldingStore(inner, [winner]), confirmed=True)
    table = deltalake.DeltaTable(str(tmp_path))
    assert table.version() == 1 and table.protocol().min_reader_version == 1


async def test_enable_dv_refuses_an_append_only_table(tmp_path: Path) -> None:
    """An append-only table is not upgraded: ``rlcd delete`` would refuse it anyway."""
    deltalake.write_deltalake(
        str(tmp_path), batch(0, 10), configuration={"delta.appendOnly": "true"}
    )
    async with LocalStore(tmp_path) as store:
        with pytest.raises(UnsupportedFeatureError, match=r"delta\.appendOnly"):
            await enable_dv(store, confirmed=True)
    table = deltalake.DeltaTable(str(tmp_path))
    assert table.version() == 0 and table.protocol().min_reader_version == 1
