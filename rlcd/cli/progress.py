"""Bin progress on a terminal: one line rewritten in place, silent when not a TTY."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

__all__ = ("BinProgress",)


class BinProgress:
    """Shows ``compacting: k/n bins`` on ``stream`` while it is a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._live = stream.isatty()
        self._done = 0
        self._total = 0

    def start(self, bins: Sequence[object]) -> None:
        self._total = len(bins)
        self._show()

    def advance(self, _bin: object) -> None:
        self._done += 1
        self._show()

    def finish(self) -> None:
        if self._live and self._total:
            self._stream.write("\n")
            self._stream.flush()

    def _show(self) -> None:
        if self._live:
            self._stream.write(f"\rcompacting: {self._done}/{self._total} bins")
            self._stream.flush()
