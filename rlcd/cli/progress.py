"""Bin progress on a terminal: one line rewritten in place, silent when not a TTY."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

__all__ = ("BinProgress",)


class BinProgress:
    """Shows ``compacting: k/n bins`` on ``stream`` while it is a terminal; ``done`` of
    ``total`` bins have ended, whatever the stream."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._live = stream.isatty()
        self.done = 0
        self.total = 0

    def start(self, bins: Sequence[object]) -> None:
        self.total = len(bins)
        self._show()

    def advance(self, _bin: object) -> None:
        self.done += 1
        self._show()

    def finish(self) -> None:
        if self._live and self.total:
            self._stream.write("\n")
            self._stream.flush()

    def _show(self) -> None:
        if self._live:
            self._stream.write(f"\rcompacting: {self.done}/{self.total} bins")
            self._stream.flush()
