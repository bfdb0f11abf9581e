"""Holding a CLI subprocess's commit put until the test's winner has committed: a real lost
race for ``python -m rlcd``, as :class:`~tests.integration.races.HoldingStore` makes one in
process.

On moto, the fault proxy sits between the CLI and S3 and holds the PUT of the commit file
(:attr:`~tests.contract.faultproxy.Fault.HOLD`) while the winner commits straight to moto. On
local disk no proxy can sit between rlcd and the file system, so the CLI runs with
:data:`SITE` first on its PYTHONPATH: that folder's ``sitecustomize`` (:func:`install`) wraps
the CLI's store in a ``HoldingStore`` whose hold waits, once, for the test's go-ahead, passed as
files in the folder ``RLCD_TEST_HOLD`` names. With ``RLCD_TEST_HOLD_AT=copy`` it holds the copy
path's writing of an output instead: each ``os.copy_file_range`` call (one copied range) waits
for the go-ahead after it copied, so a test can kill the run with an output half written.
Nothing but these tests puts :data:`SITE` on a path, and rlcd itself holds nothing.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import anyio.to_thread

from tests.contract.faultproxy import Fault, FaultProxy
from tests.integration.races import Hold, RaceTable, local_table, s3_table

if TYPE_CHECKING:  # the CLI subprocesses import this module: no pytest there
    import pytest

SITE = Path(__file__).resolve().parent / "holdsite"
_ROOT = SITE.parents[2]  # the checkout: ``tests`` must import before ``-m`` adds the cwd


class CommitHold(Protocol):
    """Holds one CLI run's first commit put until :meth:`release`."""

    def env(self) -> dict[str, str]:
        """What the CLI's environment needs for the hold."""
        ...

    def wait_held(self, timeout_s: float) -> bool:
        """Wait until the CLI's commit put is held; False on timeout."""
        ...

    def release(self) -> None: ...


@dataclass
class FileHold:
    """Local disk: the go-ahead is a file in ``folder``, the put (or, ``at="copy"``, the
    copying of an output's range) waits in the subprocess."""

    folder: Path
    at: Literal["commit", "copy"] = "commit"

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([str(SITE), str(_ROOT), os.environ.get("PYTHONPATH", "")])
        return {
            "PYTHONPATH": path,
            "RLCD_TEST_HOLD": str(self.folder),
            "RLCD_TEST_HOLD_AT": self.at,
        }

    def wait_held(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not (self.folder / "held").exists():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def release(self) -> None:
        (self.folder / "go").touch()


@dataclass
class ProxyHold:
    """moto: the fault proxy holds the PUT of the next commit file."""

    proxy: FaultProxy

    def __post_init__(self) -> None:
        self.proxy.inject(Fault.HOLD, method="PUT", contains="/_delta_log/0")

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.proxy.url}

    def wait_held(self, timeout_s: float) -> bool:
        return self.proxy.wait_held(timeout_s)

    def release(self) -> None:
        self.proxy.release()


_CREDENTIALS = {
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
}


@dataclass
class Side:
    """The table, the hold for the CLI's commit put, and the CLI's environment additions."""

    table: RaceTable
    hold: CommitHold
    env: dict[str, str]
    logs: Path


def sides(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    """A ``side`` fixture's body, for ``params=["local", "s3"]``: the race table on local
    disk with a :class:`FileHold`, or on moto behind the fault proxy with a :class:`ProxyHold`."""
    (tmp_path / "hold").mkdir()
    if request.param == "local":
        yield Side(local_table(tmp_path / "t"), FileHold(tmp_path / "hold"), {}, tmp_path)
        return
    endpoint = request.getfixturevalue("moto_endpoint")
    table = s3_table(tmp_path, endpoint, request.getfixturevalue("s3_bucket"))
    with FaultProxy(endpoint).running() as proxy:
        yield Side(table, ProxyHold(proxy), _CREDENTIALS, tmp_path)


@dataclass(frozen=True)
class Done:
    code: int
    stdout: str
    stderr: str


async def losing_run(side: Side, args: list[str], winner: Hold) -> Done:
    """``python -m rlcd ARGS`` whose commit put is held until ``winner`` committed."""
    out, err = side.logs / "out", side.logs / "err"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = await anyio.open_process(
            [sys.executable, "-m", "rlcd", *args],
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, **side.env, **side.hold.env()},
        )
        async with process:  # waited for whatever happens (killed when cancelled)
            try:
                held = await anyio.to_thread.run_sync(side.hold.wait_held, 120)
                if held:
                    await winner()
            finally:
                side.hold.release()
            with anyio.fail_after(120):
                code = await process.wait()
    done = Done(code, out.read_text(), err.read_text())
    assert held, done
    return done


def install(folder: str, at: str) -> None:
    """In the CLI subprocess: hold its first commit put (``at="commit"``) or every copied
    range after it was copied (``at="copy"``) until ``folder/go`` exists."""
    held, go = Path(folder) / "held", Path(folder) / "go"
    if at == "copy":
        _hold_copies(held, go)
        return
    import rlcd.storage as storage  # the CLI opens its store through it, at run time
    from tests.integration.races import HoldingStore

    opened = storage.open_store

    async def hold() -> None:
        held.touch()
        while not go.exists():  # noqa: ASYNC110 (the go-ahead comes from another process)
            await anyio.sleep(0.02)

    @asynccontextmanager
    async def holding(uri: str, **kw: Any) -> AsyncIterator[Any]:
        async with opened(uri, **kw) as inner:
            yield HoldingStore(inner, [hold])

    storage.open_store = holding  # type: ignore[assignment]


def _hold_copies(held: Path, go: Path) -> None:
    """Make each ``os.copy_file_range`` call, in rlcd's worker thread, wait for ``go`` after
    it copied: the output's temp file then holds its first pieces only."""
    copy = os.copy_file_range

    def held_copy(*args: Any) -> int:
        done = copy(*args)
        held.touch()
        while not go.exists():
            time.sleep(0.02)
        return done

    os.copy_file_range = held_copy
