"""The ``_last_checkpoint`` hint: its JSON checksum, and the document rlcd writes. Pure.

Checksum (delta-protocol.md §1.3, the protocol's "JSON checksum"): every scalar leaf becomes
``path=value``, object keys as ``"<urlencoded key>"`` and array indexes bare, joined by ``+``;
strings ``"<urlencoded value>"``, other scalars as JSON; pairs sorted by the UTF-8 bytes of the
path and joined by ``,``; the top-level ``checksum`` key left out; the MD5 hex digest of that.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

__all__ = ("json_checksum", "last_checkpoint_document")
__pure__ = True


def _enc(text: str) -> str:
    return quote(text, safe="-._~")


def json_checksum(document: Mapping[str, Any]) -> str:
    """The protocol's checksum of a ``_last_checkpoint`` document (its own ``checksum`` key,
    if any, excluded)."""
    pairs: list[tuple[bytes, str]] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, f'{path}+"{_enc(k)}"' if path else f'"{_enc(k)}"')
        elif isinstance(value, list | tuple):
            for i, v in enumerate(value):
                walk(v, f"{path}+{i}")
        else:
            rendered = f'"{_enc(value)}"' if isinstance(value, str) else json.dumps(value)
            pairs.append((path.encode(), f"{path}={rendered}"))

    walk({k: v for k, v in document.items() if k != "checksum"}, "")
    pairs.sort(key=lambda p: p[0])
    return hashlib.md5(",".join(p[1] for p in pairs).encode(), usedforsecurity=False).hexdigest()


def last_checkpoint_document(
    *, version: int, size: int, size_in_bytes: int, num_of_add_files: int
) -> bytes:
    """The ``_last_checkpoint`` of a single-file checkpoint, ``version`` and ``size`` first (as
    Spark orders them for old readers), with its checksum. No ``parts``: that key names a
    multi-part checkpoint, and a reader told ``parts: 1`` looks for a part file."""
    document: dict[str, Any] = {
        "version": version,
        "size": size,
        "sizeInBytes": size_in_bytes,
        "numOfAddFiles": num_of_add_files,
    }
    document["checksum"] = json_checksum(document)
    return json.dumps(document, separators=(",", ":")).encode()
