"""Progress on a terminal: one line rewritten in place, silent when not a TTY."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rlcd.compaction.plan import Bin

__all__ = ("BinProgress", "FileProgress")


class _Line:
    """The one line on ``stream``, written only while it is a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._live = stream.isatty()
        self._shown = False

    def _show(self, text: str) -> None:
        if self._live:
            self._stream.write(f"\r{text}")
            self._stream.flush()
            self._shown = True

    def finish(self) -> None:
        """End the line, so what is written next starts a line of its own."""
        if self._shown:
            self._stream.write("\n")
            self._stream.flush()


class BinProgress(_Line):
    """Shows ``compacting: k/n bins`` on ``stream`` while it is a terminal; ``done`` of
    ``total`` bins have ended and ``in_flight`` are being rewritten, whatever the stream."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
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
        self._show_bins()

    def begin(self, bin_: Bin) -> None:
        self._started.add(bin_.bin_id)

    def advance(self, bin_: Bin) -> None:
        self._ended.add(bin_.bin_id)
        self._show_bins()

    def finish(self) -> None:
        if self.total:
            super().finish()

    def _show_bins(self) -> None:
        self._show(f"compacting: {self.done}/{self.total} bins")


class FileProgress(_Line):
    """Shows ``verifying: k/n files`` on ``stream`` while it is a terminal: called with the
    files done and the files in all."""

    def __call__(self, done: int, total: int) -> None:
        self._show(f"verifying: {done}/{total} files")
