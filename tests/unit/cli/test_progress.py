"""Progress shows on a terminal and stays out of pipes; sizes read like a person writes them."""

from __future__ import annotations

import io

from rlcd.cli.progress import BinProgress, FileProgress
from rlcd.cli.report import human_bytes
from rlcd.compaction.plan import Bin
from rlcd.delta.actions import AddFile


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _bin(name: str) -> Bin:
    sources = (AddFile(path=f"{name}1", size=1), AddFile(path=f"{name}2", size=1))
    return Bin({}, sources, 2, purges_dvs=False, needs_footer_counts=False)


def test_progress_on_a_terminal_only() -> None:
    """A TTY gets one line rewritten in place; a pipe gets nothing."""
    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        progress = BinProgress(stream)
        bins = [_bin("a"), _bin("b")]
        progress.start(bins)
        progress.advance(bins[0])
        progress.advance(bins[1])
        progress.finish()
    assert tty.getvalue() == (
        "\rcompacting: 0/2 bins\rcompacting: 1/2 bins\rcompacting: 2/2 bins\n"
    )
    assert pipe.getvalue() == ""


def test_in_flight_counts_the_bins_started_and_not_ended() -> None:
    """A bin waiting for its slot is not in flight; one that failed before it started (ended,
    never begun) neither."""
    progress = BinProgress(io.StringIO())
    bins = [_bin(name) for name in "abcde"]
    progress.start(bins)
    for b in bins[:3]:
        progress.begin(b)
    progress.advance(bins[0])
    progress.advance(bins[4])  # failed before its start
    assert (progress.total, progress.done, progress.in_flight) == (5, 2, 2)


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1024, 5 * 2**20, 3 * 2**40)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "5.0 MiB",
        "3.0 TiB",
    ]


def test_file_progress_on_a_terminal_only() -> None:
    """Verify's file count is one line rewritten on a TTY, ended by ``finish``; a pipe gets
    nothing."""
    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        progress = FileProgress(stream)
        for done in range(3):
            progress(done, 2)
        progress.finish()
    assert tty.getvalue() == (
        "\rverifying: 0/2 files\rverifying: 1/2 files\rverifying: 2/2 files\n"
    )
    assert pipe.getvalue() == ""
