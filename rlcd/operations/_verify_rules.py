"""What counts as a problem of a live file, from what storage showed of it. Pure: no IO.

The files half of ``rlcd verify`` observes each file of the current snapshot
(:mod:`rlcd.operations._verify_files` does the IO) and these rules turn one observation into the
problems it shows, each naming the file as its ``add`` does:

* the data file exists and has the size its ``add`` says (a different size means another file
  took its place, or it was truncated or appended to);
* its deletion vector, if any, reads and passes every check of :func:`rlcd.delta.dv.load_dv`:
  the DV file exists, its CRC-32 holds, the bitmap decodes, and its cardinality equals the
  descriptor's (inline DVs decode the same way);
* every position the DV deletes is below the file's row count (the stats' ``numRecords``, else
  the Parquet footer's): a reader would otherwise fail on it, or, worse, ignore it;
* with ``--deep``, its data reads in full: page checksums, decoding, row counts (the read is
  :mod:`rlcd.operations._verify_deep`'s).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcd.delta.actions import AddFile

__all__ = ("FileProblem", "FileObservation", "FilesCheck", "file_problems")
__pure__ = True


@dataclass(frozen=True, slots=True)
class FileProblem:
    """One thing wrong with one live file: ``path`` as its ``add`` names it, ``what`` in words."""

    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


@dataclass(frozen=True, slots=True)
class FileObservation:
    """What storage showed of one live file.

    ``outside`` says its path lies outside the table (then nothing else was looked at).
    ``stored_size`` is its size on storage, ``None`` when it is missing. ``dv_error`` says why
    its DV could not be read or failed a check; ``max_deleted`` is the largest position a DV
    that read cleanly deletes (``None``: no DV, or one deleting nothing). ``rows`` is its
    physical row count (stats, else footer; ``None`` when neither was known or needed) and
    ``rows_error`` why the footer could not be read. ``data_error`` says why the data did not
    read in full (a deep verify only).
    """

    add: AddFile
    outside: bool = False
    stored_size: int | None = None
    dv_error: str | None = None
    max_deleted: int | None = None
    rows: int | None = None
    rows_error: str | None = None
    data_error: str | None = None


def file_problems(seen: FileObservation) -> tuple[FileProblem, ...]:
    """Every problem ``seen`` shows, in the order a reader would meet them."""
    add = seen.add
    if seen.outside:
        return (FileProblem(add.path, "lies outside the table"),)
    found: list[str] = []
    if seen.stored_size is None:
        found.append("data file is missing")
    elif seen.stored_size != add.size:
        found.append(f"is {seen.stored_size} bytes on storage, its add says {add.size}")
    if seen.dv_error is not None:
        found.append(seen.dv_error)
    if seen.rows_error is not None:
        found.append(f"cannot read its row count from the Parquet footer: {seen.rows_error}")
    if seen.max_deleted is not None and seen.rows is not None and seen.max_deleted >= seen.rows:
        found.append(
            f"its deletion vector deletes row {seen.max_deleted}, but the file has {seen.rows} rows"
        )
    if seen.data_error is not None:
        found.append(f"data does not read: {seen.data_error}")
    return tuple(FileProblem(add.path, what) for what in found)


@dataclass(frozen=True, slots=True)
class FilesCheck:
    """The files half of a verification at ``version``: how much was looked at (``read``: the
    files a deep verify read in full, ``None`` when it was not deep), and every problem found,
    sorted by path (empty means every live file checked out)."""

    version: int
    files: int
    dvs: int
    footers: int
    problems: tuple[FileProblem, ...]
    read: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems
