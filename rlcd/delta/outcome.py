"""The outcome values of a transaction and its reconciliation. Pure: values only.

Kept apart from :mod:`rlcd.delta.transaction` (which does IO) so that the pure reconcile maths
and the conflict rules can return an :class:`Abort` without importing a store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ("Abort",)
__pure__ = True

_CODE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


@dataclass(frozen=True, slots=True)
class Abort:
    """Stop: the transaction (or one bin of it) cannot commit.

    ``reason`` is a stable snake_case code (a metric label: never reworded once released);
    ``detail`` says, for people, which version, file or position made it so.
    """

    reason: str
    detail: str = ""

    def __post_init__(self) -> None:
        if not _CODE.fullmatch(self.reason):
            raise ValueError(f"an abort reason is a snake_case code, got {self.reason!r}")

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else self.reason
