"""``rlcd enable-dv``: upgrade a table so deletion vectors may be written (``rlcd delete``).

One commit through the transaction driver: a protocol at reader 3 / writer 7 listing every
feature the table had (the ones its legacy versions implied, named) plus ``deletionVectors``,
and the metadata with ``delta.enableDeletionVectors=true``. Readers without table features or
DV support cannot read the table afterwards, so a protocol change needs the caller's consent
(``confirmed``); only setting the property on a table whose protocol lists the feature does not.
A winner that changed the protocol or the metadata aborts it: nothing is committed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from rlcd.delta.actions import Action, Metadata, Protocol
from rlcd.delta.load import load_snapshot, table_config
from rlcd.delta.outcome import Abort
from rlcd.delta.protocol import TableConfig
from rlcd.delta.replay import Snapshot
from rlcd.delta.transaction import Winner, run_transaction
from rlcd.delta.write import make_commit_info
from rlcd.errors import ConfigError
from rlcd.storage.base import ObjectStore

__all__ = ("DV_PROPERTY", "READER_WARNING", "DvUpgrade", "upgraded_protocol", "enable_dv")

DV_PROPERTY: Final = "delta.enableDeletionVectors"
FEATURE: Final = "deletionVectors"
READER_WARNING: Final = (
    "readers then need reader version 3 with table features and deletion vectors: Spark 3.4+ "
    "with Delta 2.3+; the deltalake Python package (delta-rs) reads it only through "
    "DeltaTable.scan() or QueryBuilder (its to_pyarrow_table(), to_pyarrow_dataset() and "
    "to_pandas() refuse the table: checked with deltalake 1.6.6); readers without deletion "
    "vector support cannot read it at all"
)
"""Who can read the upgraded table; exact for the deltalake this project tests with."""


@dataclass(frozen=True, slots=True)
class DvUpgrade:
    """What enabling DVs changes (``protocol`` None: it stays, ``set_property`` False: the
    property is set already) and the version committed (None: nothing committed)."""

    table: str
    before: Protocol
    protocol: Protocol | None
    set_property: bool
    version: int | None = None

    @property
    def nothing_to_do(self) -> bool:
        return self.protocol is None and not self.set_property


def upgraded_protocol(config: TableConfig) -> Protocol | None:
    """The protocol allowing DVs, keeping every feature the table has; None if it allows them."""
    if config.deletion_vectors_supported and FEATURE in config.reader_features:
        return None
    readers = sorted(config.reader_features | {FEATURE})
    writers = sorted(config.writer_features | set(readers))
    old = config.protocol
    return replace(
        old,
        min_reader_version=max(old.min_reader_version, 3),
        min_writer_version=max(old.min_writer_version, 7),
        reader_features=tuple(readers),
        writer_features=tuple(writers),
    )


def _plan(store: ObjectStore, snapshot: Snapshot) -> DvUpgrade:
    config = table_config(snapshot)
    config.ensure_rows_deletable()  # an upgrade ``rlcd delete`` would then refuse to use: none
    return DvUpgrade(
        store.root,
        snapshot.protocol,
        upgraded_protocol(config),
        str(config.properties.get(DV_PROPERTY, "false")).lower() != "true",
    )


def _actions(plan: DvUpgrade, snapshot: Snapshot, txn_id: str) -> list[Action]:
    actions: list[Action] = [
        make_commit_info(
            operation="SET TBLPROPERTIES",
            parameters={"properties": json.dumps({DV_PROPERTY: "true"})},
            read_version=snapshot.version,
            previous_ict=snapshot.in_commit_timestamp,
            isolation_level="Serializable",
            is_blind_append=False,
            metrics={},
            txn_id=txn_id,
            now_ms=int(time.time() * 1000),
            in_commit_timestamps=table_config(snapshot).in_commit_timestamps,
        )
    ]
    if plan.protocol is not None:
        actions.append(plan.protocol)
    metadata: Metadata = snapshot.metadata
    actions.append(replace(metadata, configuration={**metadata.configuration, DV_PROPERTY: "true"}))
    return actions


async def enable_dv(
    store: ObjectStore, *, dry_run: bool = False, confirmed: bool = False
) -> DvUpgrade:
    """Allow deletion vectors on the table, in one commit (none with ``dry_run``).

    Raises:
        ConfigError: the protocol must change (locking out older readers) and the caller did
            not confirm it.
        UnsupportedFeatureError: rlcd cannot write the table, or would not delete rows from it
            (append-only, change data feed): nothing is upgraded.
        ConcurrentModificationError: a winner changed the protocol or the metadata.
    """
    snapshot = await load_snapshot(store)
    plan = _plan(store, snapshot)
    if plan.nothing_to_do or dry_run:
        return plan
    if plan.protocol is not None and not confirmed:
        raise ConfigError(
            "enabling deletion vectors upgrades the table's protocol: "
            f"{READER_WARNING}; pass --yes to upgrade, or --dry-run to see the change"
        )

    async def build(
        state: DvUpgrade, current: Snapshot, txn_id: str
    ) -> tuple[list[Action], DvUpgrade]:
        return _actions(state, current, txn_id), state

    async def rebase(
        state: DvUpgrade, _current: Snapshot, winners: Sequence[Winner]
    ) -> DvUpgrade | Abort:
        for version, actions in winners:
            if any(isinstance(a, Metadata | Protocol) for a in actions):
                return Abort(
                    "concurrent_change",
                    f"version {version} changed the table's metadata or protocol",
                )
        return state

    result = await run_transaction(
        store, snapshot, plan, build=build, rebase=rebase, txn_id=str(uuid.uuid4())
    )
    return replace(plan, version=result.version("another writer's commit conflicts"))
