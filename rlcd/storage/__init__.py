"""Object storage for rlcd: one contract (:mod:`rlcd.storage.base`), two backends.

Open a store for a table with :func:`open_store`. A process handling many S3 tables opens one
:class:`S3Client` and passes it as ``client=``, so the tables share a connection pool.

The S3 backend (aiobotocore, aiohttp: a fifth of a second to import) is imported only when an
``s3://`` table is opened or one of its names is used, the way pyiceberg's ``load_file_io``
picks and imports a backend by URI scheme: a local table or a ``--help`` never pays for it.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from rlcd.storage._local import LocalStore
from rlcd.storage.base import (
    MIN_PART_SIZE,
    AlreadyExists,
    ObjectMeta,
    ObjectStore,
    ObjectWriter,
    PutResult,
    Written,
)
from rlcd.storage.retry import RetryPolicy
from rlcd.storage.s3config import S3Config
from rlcd.storage.uri import TableUri

if TYPE_CHECKING:
    from rlcd.storage.s3 import S3Client, S3Store

__all__ = (
    "open_store",
    "ObjectStore",
    "ObjectWriter",
    "ObjectMeta",
    "Written",
    "AlreadyExists",
    "PutResult",
    "MIN_PART_SIZE",
    "TableUri",
    "RetryPolicy",
    "LocalStore",
    "S3Config",
    "S3Client",
    "S3Store",
)

_LAZY = {"S3Client": "rlcd.storage.s3", "S3Store": "rlcd.storage.s3"}
"""Exported names whose module is imported on first use."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


@asynccontextmanager
async def open_store(
    uri: TableUri | str,
    *,
    s3: S3Config | None = None,
    client: S3Client | None = None,
) -> AsyncIterator[ObjectStore]:
    """A store rooted at ``uri``, closed on exit.

    Args:
        uri: ``s3://bucket/prefix`` (keys are relative to the prefix), ``file:///dir`` or a
            plain path (keys are relative to the directory).
        s3: settings for a client of this store's own; ignored for local URIs.
        client: an open, shared client to use instead; it stays open on exit.

    Raises:
        ConfigError: the URI is malformed.
        ValueError: both ``s3`` and ``client`` were given.
    """
    if s3 is not None and client is not None:
        raise ValueError("pass s3 settings or a shared client, not both")
    table = uri if isinstance(uri, TableUri) else TableUri.parse(uri)
    async with AsyncExitStack() as stack:
        store: ObjectStore
        if not table.is_s3:
            store = LocalStore(table.prefix)
        else:
            if client is None:
                from rlcd.storage.s3 import S3Client

                client = await stack.enter_async_context(S3Client(s3))
            store = client.store(table)
        stack.push_async_callback(store.aclose)
        yield store
