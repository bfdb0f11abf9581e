"""Bin progress on a terminal: one line rewritten in place, silent when not a TTY."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rlcd.compaction.plan import Bin

__all__ = ("BinProgress",)


class BinProgress:
    """Shows ``compacting: k/n bins`` on ``stream`` while it is a terminal; ``done`` of
    ``total`` bins have ended and ``in_flight`` are being rewritten, whatever the stream."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._live = stream.isatty()
        self._started: set[str] = set()
        self._ended: set[str] = set()
        self.total = 0

    @property
    def done(self) -> int:
        return len(self._ended)

    @property
    def in_flight(self) -> int:
        """Bins started (holding their rewrite slot) and not ended: a bin waiting for its
        slot is not in flight."""
        return len(self._started - self._ended)

    def start(self, bins: Sequence[Bin]) -> None:
        self.total = len(bins)
        self._show()

    def begin(self, bin_: Bin) -> None:
        self._started.add(bin_.bin_id)

    def advance(self, bin_: Bin) -> None:
        self._ended.add(bin_.bin_id)
        self._show()

    def finish(self) -> None:
        if self._live and self.total:
            self._stream.write("\n")
            self._stream.flush()

    def _show(self) -> None:
        if self._live:
            self._stream.write(f"\rcompacting: {self.done}/{self.total} bins")
            self._stream.flush()
