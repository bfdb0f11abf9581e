"""Table URIs: ``s3://bucket/prefix``, ``file:///abs/path`` and plain paths. Pure."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from rlcd.errors import ConfigError

__all__ = ("TableUri",)
__pure__ = True


@dataclass(frozen=True, slots=True)
class TableUri:
    """A parsed table location.

    Invariants: ``scheme`` is ``"s3"`` or ``"file"``; for ``s3`` ``bucket`` is non-empty and
    ``prefix`` has no leading or trailing ``/``; for ``file`` ``prefix`` is an absolute,
    normalised path and ``bucket`` is empty.
    """

    scheme: str
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, text: str) -> TableUri:
        """Parse a URI or a plain (relative or absolute) local path."""
        if not text:
            raise ConfigError("table URI is empty")
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        if scheme in {"s3", "s3a", "s3n", "file"} and ("?" in text or "#" in text):
            # a query or fragment would be dropped silently: another table than the one meant
            raise ConfigError(
                f"table URI {text!r} has '?' or '#': write them as %3F and %23 in a URI"
            )
        if scheme in {"s3", "s3a", "s3n"}:
            if not parts.netloc:
                raise ConfigError(f"table URI {text!r} has no bucket")
            return cls("s3", parts.netloc, unquote(parts.path).strip("/"))
        if scheme == "file":
            if parts.netloc not in {"", "localhost"}:
                raise ConfigError(f"table URI {text!r}: file URIs must be local")
            return cls("file", "", os.path.normpath(unquote(parts.path)))
        if scheme and len(scheme) > 1:  # one letter is a Windows drive, not a scheme
            raise ConfigError(f"table URI {text!r}: unsupported scheme {scheme!r} (s3, file)")
        return cls("file", "", os.path.abspath(text))

    @property
    def is_s3(self) -> bool:
        return self.scheme == "s3"

    def __str__(self) -> str:
        if self.is_s3:
            return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return f"file://{self.prefix}"
