"""AWS Signature Version 4 for the S3 data requests rlcd sends itself (sans-IO).

The hot requests of a compaction (a GET of every source, an UploadPart of every part of its
output) skip botocore's request pipeline, which costs event-loop CPU on every request
(parameter serialisation, endpoint rules, event hooks, user agent, response parsing): they are
signed here and sent on rlcd's own connections (see :mod:`rlcd.storage.s3`). The
payload is not hashed (``UNSIGNED-PAYLOAD``): a body rlcd sends carries a CRC32 header, which
is signed with every other ``x-amz-*`` header.

Pure: the time and the credentials are arguments.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from urllib.parse import quote

__all__ = ("SigningKey", "sign", "canonical_query", "quote_key", "UNSIGNED_PAYLOAD")
__pure__ = True

UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
_ALGORITHM = "AWS4-HMAC-SHA256"


@dataclass(frozen=True, slots=True)
class SigningKey:
    """Credentials as of one request (a refreshable set is frozen per request)."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)


def quote_key(key: str) -> str:
    """An object key as S3 wants it in a request path (and signs it: S3 does not re-encode)."""
    return quote(key, safe="/~")


def canonical_query(params: Mapping[str, str]) -> str:
    """The query string, encoded and ordered as SigV4 signs it (send exactly this)."""
    return "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items())
    )


def sign(
    method: str,
    host: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    *,
    key: SigningKey,
    region: str,
    when: datetime,
    service: str = "s3",
) -> dict[str, str]:
    """The headers to send: ``headers`` plus ``host``, the date, the payload marker, the
    session token and ``Authorization``, all of them signed.

    ``path`` is the encoded request path, ``query`` the output of :func:`canonical_query`,
    ``when`` an aware UTC time.
    """
    stamp = when.strftime("%Y%m%dT%H%M%SZ")
    out = {k.lower(): v.strip() for k, v in headers.items()}
    out |= {"host": host, "x-amz-date": stamp, "x-amz-content-sha256": UNSIGNED_PAYLOAD}
    if key.token:
        out["x-amz-security-token"] = key.token
    names = sorted(out)
    signed = ";".join(names)
    canonical = "\n".join(
        (method, path, query, *(f"{n}:{out[n]}" for n in names), "", signed, UNSIGNED_PAYLOAD)
    )
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    to_sign = f"{_ALGORITHM}\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    secret = _signing_key(key.secret_key, stamp[:8], region, service)
    signature = hmac.new(secret, to_sign.encode(), hashlib.sha256).hexdigest()
    out["authorization"] = (
        f"{_ALGORITHM} Credential={key.access_key}/{scope}, SignedHeaders={signed}, "
        f"Signature={signature}"
    )
    return out


@lru_cache(maxsize=16)
def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    """The derived key: four HMACs, the same for a whole day."""
    derived = f"AWS4{secret}".encode()
    for part in (day, region, service, "aws4_request"):
        derived = hmac.new(derived, part.encode(), hashlib.sha256).digest()
    return derived
