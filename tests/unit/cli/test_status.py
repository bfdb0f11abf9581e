"""``rlcd status``'s last compaction: rlcd's OPTIMIZE commits only."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from rlcd.cli.status import _last_compaction
from rlcd.storage import LocalStore


def _commit(log: Path, version: int, operation: str, engine: str) -> None:
    info = {"timestamp": 1_700_000_000_000 + version, "operation": operation}
    info["engineInfo"] = engine
    (log / f"{version:020d}.json").write_text(json.dumps({"commitInfo": info}) + "\n")


def test_last_compaction_skips_rlcds_deletes_and_other_writers(tmp_path: Path) -> None:
    """A DELETE or SET TBLPROPERTIES rlcd committed after its compaction is not the last
    compaction, nor is another engine's OPTIMIZE."""
    log = tmp_path / "_delta_log"
    log.mkdir()
    _commit(log, 0, "WRITE", "Apache-Spark/3.5 Delta-Lake/3.2")
    _commit(log, 1, "OPTIMIZE", "rlcd/1.0")
    _commit(log, 2, "DELETE", "rlcd/1.0")
    _commit(log, 3, "SET TBLPROPERTIES", "rlcd/1.0")
    _commit(log, 4, "OPTIMIZE", "Apache-Spark/3.5 Delta-Lake/3.2")

    async def last(version: int) -> str | None:
        async with LocalStore(str(tmp_path)) as store:
            return await _last_compaction(store, version)

    assert anyio.run(last, 4) == "version 1 at 2023-11-14T22:13:20.001000+00:00"
    assert anyio.run(last, 0) is None
