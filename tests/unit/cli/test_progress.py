"""Progress shows on a terminal and stays out of pipes; sizes read like a person writes them."""

from __future__ import annotations

import io

from rlcd.cli.progress import BinProgress
from rlcd.cli.report import human_bytes


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_only() -> None:
    """A TTY gets one line rewritten in place; a pipe gets nothing."""
    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        progress = BinProgress(stream)
        progress.start([object(), object()])
        progress.advance(None)
        progress.advance(None)
        progress.finish()
    assert tty.getvalue() == (
        "\rcompacting: 0/2 bins\rcompacting: 1/2 bins\rcompacting: 2/2 bins\n"
    )
    assert pipe.getvalue() == ""


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1024, 5 * 2**20, 3 * 2**40)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "5.0 MiB",
        "3.0 TiB",
    ]
