"""Holding a CLI subprocess's commit put until the test's winner has committed: a real lost
race for ``python -m rlcd``, as :class:`~tests.integration.races.HoldingStore` makes one in
process.

On moto, the fault proxy sits between the CLI and S3 and holds the PUT of the commit file
(:attr:`~tests.contract.faultproxy.Fault.HOLD`) while the winner commits straight to moto. On
local disk no proxy can sit between rlcd and the file system, so the CLI runs with
:data:`SITE` first on its PYTHONPATH: that folder's ``sitecustomize`` (:func:`install`) wraps
the CLI's store in a ``HoldingStore`` whose hold waits, once, for the test's go-ahead, passed as
files in the folder ``RLCD_TEST_HOLD`` names. Nothing but these tests puts :data:`SITE` on a
path, and rlcd itself holds nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio

from tests.contract.faultproxy import Fault, FaultProxy

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
    """Local disk: the go-ahead is a file in ``folder``, the put waits in the subprocess."""

    folder: Path

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([str(SITE), str(_ROOT), os.environ.get("PYTHONPATH", "")])
        return {"PYTHONPATH": path, "RLCD_TEST_HOLD": str(self.folder)}

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


def install(folder: str) -> None:
    """In the CLI subprocess: hold its first commit put until ``folder/go`` exists."""
    import rlcd.storage as storage  # the CLI opens its store through it, at run time
    from tests.integration.races import HoldingStore

    opened = storage.open_store
    held, go = Path(folder) / "held", Path(folder) / "go"

    async def hold() -> None:
        held.touch()
        while not go.exists():  # noqa: ASYNC110 (the go-ahead comes from another process)
            await anyio.sleep(0.02)

    @asynccontextmanager
    async def holding(uri: str, **kw: Any) -> AsyncIterator[Any]:
        async with opened(uri, **kw) as inner:
            yield HoldingStore(inner, [hold])

    storage.open_store = holding  # type: ignore[assignment]
