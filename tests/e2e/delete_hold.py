"""Holding a daemon subprocess in the middle of a vacuum's deletes, to ``kill -9`` it there.

No proxy can sit between rlcd and a local file system, and a vacuum only deletes files older
than an hour, which moto cannot backdate; so the daemon runs with
:data:`~tests.e2e.commit_hold.SITE` first on its PYTHONPATH and ``RLCD_TEST_HOLD_DELETE``
naming a folder: that folder's ``sitecustomize`` calls :func:`install`, which makes the local
store's first batch delete remove its first key, touch ``held`` in the folder and wait there
for ever. Nothing but these tests puts the site folder on a path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio


def install(folder: str) -> None:
    """In the daemon subprocess: hold the first ``delete_many`` after its first key."""
    import rlcd.storage as storage  # before rlcd.daemon.app imports LocalStore from it

    held = Path(folder) / "held"

    class HeldDeletes(storage.LocalStore):
        async def delete_many(self, keys: Sequence[str]) -> None:
            if held.exists():
                await super().delete_many(keys)
                return
            await super().delete_many(keys[:1])
            held.touch()
            await anyio.sleep_forever()

    storage.LocalStore = HeldDeletes  # type: ignore[misc]
