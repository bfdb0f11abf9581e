"""Two ``rlcd compact`` of one table at once, on local disk and on moto's S3: the second finds
the table's lease held by the first (whose commit put is held, :mod:`tests.e2e.commit_hold`),
says who holds it and until when, and exits 6 having done nothing; with ``--no-lease`` it does
the work, and the first run's commit is then superseded (the duplicate work the lease spares).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import anyio.to_thread
import pytest

from tests.e2e.cli import rlcd
from tests.e2e.commit_hold import Side, losing_run, sides
from tests.integration.races import ROWS, judge

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.integration]

ALL = range(4 * ROWS)
HELD = re.compile(
    r"^(?P<table>\S+): skipped: the table's lease is held by rlcd compact \(pid \d+ on \S+\) "
    r"until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; nothing done$"
)


@pytest.fixture(params=["local", "s3"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    yield from sides(request, tmp_path)


def _second(side: Side, *flags: str) -> subprocess.CompletedProcess[str]:
    """Another ``rlcd compact`` of the table, straight to its store (no hold, no proxy)."""
    s3 = side.table.s3
    endpoint = {"AWS_ENDPOINT_URL": str(s3.endpoint_url)} if s3 is not None else {}
    return rlcd("compact", side.table.uri, *flags, env={**side.env, **endpoint})


async def _leases(side: Side) -> list[str]:
    async with side.table.store() as store:
        return [m.key async for m in store.list("_rlcd/")]


async def test_a_second_run_skips_a_table_the_first_holds(side: Side) -> None:
    """While the first run works, the second is turned away with exit 6 and who holds the
    lease; the first then commits, and releases its lease."""
    second: list[subprocess.CompletedProcess[str]] = []

    async def meanwhile() -> None:
        second.append(await anyio.to_thread.run_sync(_second, side))

    first = await losing_run(side, ["compact", side.table.uri], meanwhile)
    (skipped,) = second
    assert skipped.returncode == 6, (skipped.stdout, skipped.stderr)
    assert HELD.match(skipped.stdout.strip()), skipped.stdout
    assert skipped.stderr == ""
    assert first.code == 0, (first.stdout, first.stderr)
    assert ": committed version 4: 4 files (" in first.stdout
    assert await _leases(side) == []
    await judge(side.table, set(ALL))


async def test_without_the_lease_both_runs_do_the_work(side: Side) -> None:
    """``--no-lease``: the second run compacts the table itself, and the first, which held
    the lease, finds its work done (superseded, exit 5): the log kept it correct."""
    second: list[subprocess.CompletedProcess[str]] = []

    async def meanwhile() -> None:
        second.append(await anyio.to_thread.run_sync(partial(_second, side, "--no-lease")))

    first = await losing_run(side, ["compact", side.table.uri], meanwhile)
    (ran,) = second
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    assert first.code == 5, (first.stdout, first.stderr)
    assert await _leases(side) == []
    await judge(side.table, set(ALL))
