"""Whether a table's other writers commit the way rlcd does, judged by what they leave in
``_delta_log``.

rlcd commits with a put-if-absent of ``_delta_log/N.json``. On S3, writers that coordinate
through DynamoDB (Spark's S3DynamoDBLogStore; delta-rs up to 1.6.0 with
``AWS_S3_LOCKING_PROVIDER=dynamodb``, or with unsafe renames) commit elsewhere first and copy a
temporary file to ``N.json`` afterwards: they do not see rlcd's commits, rlcd does not see theirs
in time, and one can overwrite the other's (``delta-protocol.md`` §7.5). Each of their commits
leaves its temporary file in the log until a lifecycle rule expires it, so a table they write
is recognised, and refused, before rlcd plans anything.
"""

from __future__ import annotations

from typing import Final

from rlcd._tasks import gather
from rlcd.delta.log_path import LOG_DIR
from rlcd.errors import UnsupportedFeatureError
from rlcd.storage.base import ObjectStore

__all__ = ("ensure_put_if_absent_writers", "external_commit_temp", "refuse_external_commits")

EXTERNAL_COMMIT_TEMPS: Final = (
    f"{LOG_DIR}/.tmp/",  # Spark's S3DynamoDBLogStore: .tmp/N.json.<uuid>
    f"{LOG_DIR}/_commit_",  # delta-rs <= 1.6.0 without conditional puts: _commit_<uuid>.json.tmp
)


async def ensure_put_if_absent_writers(store: ObjectStore, *, version: int) -> None:
    """Raise unless the table's writers may commit next to rlcd's put-if-absent (a local table
    always: its writers rename without replacing, which is put-if-absent too).

    Raises:
        UnsupportedFeatureError: as :func:`refuse_external_commits`.
    """
    refuse_external_commits(await external_commit_temp(store), table=store.root, version=version)


async def external_commit_temp(store: ObjectStore) -> str | None:
    """The key of a temporary commit file in the log, if there is one (both prefixes are
    listed at once); never one on local disk."""
    if store.local_files() is not None:
        return None

    async def first(prefix: str) -> str | None:
        async for meta in store.list(prefix):
            return meta.key
        return None

    found = await gather(*(first(prefix) for prefix in EXTERNAL_COMMIT_TEMPS))
    return next((key for key in found if key is not None), None)


def refuse_external_commits(temp: str | None, *, table: str, version: int) -> None:
    """Raise if ``temp`` (from :func:`external_commit_temp`) names a temporary commit file.

    Raises:
        UnsupportedFeatureError: the log holds a temporary commit file of a writer that commits
            through DynamoDB or by renames; the message names the file.
    """
    if temp is not None:
        raise UnsupportedFeatureError(
            f"the log holds {temp}, the temporary commit file of a writer that commits "
            "through DynamoDB or by renaming (Spark's S3DynamoDBLogStore, delta-rs 1.6.0 or "
            "older): such writers do not see rlcd's put-if-absent commits, and one could "
            "overwrite the other's; refusing to write",
            table=table,
            features=("externalCommitCoordination",),
            version=version,
        )
