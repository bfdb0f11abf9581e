"""Expired log cleanup's rules: what goes and what stays, on listings built by hand."""

from __future__ import annotations

import pytest

from rlcd.delta._log_retention import (
    ExpiredLog,
    LogFile,
    expired_log,
    expired_sidecars,
    sidecar_sources,
)
from rlcd.delta.log_path import LogPath
from rlcd.errors import CorruptLogError

CUTOFF = 1_000_000
OLD, NEW = CUTOFF - 1, CUTOFF + 1
UUID = "3a0d65cd-4056-49b8-937b-95f9e3ee90e5"


def f(name: str, ms: int = OLD) -> LogFile:
    path = LogPath.parse(name)
    assert path is not None, name
    return LogFile(path, ms)


def commits(first: int, last: int, ms: int = OLD) -> list[LogFile]:
    return [f(f"{v:020d}.json", ms) for v in range(first, last + 1)]


def names(keys: tuple[str, ...]) -> list[str]:
    return [k.removeprefix("_delta_log/") for k in keys]


def plan(files: list[LogFile], hinted: int | None) -> ExpiredLog:
    return expired_log(files, cutoff_ms=CUTOFF, hinted=hinted, table="t")


def test_no_checkpoint_old_enough_deletes_nothing() -> None:
    files = [*commits(0, 20), f(f"{10:020d}.checkpoint.parquet", NEW)]
    assert plan(files, 10).keys == ()
    assert plan(commits(0, 20), None).kept is None


def test_without_a_hint_nothing_goes() -> None:
    files = [*commits(0, 20), f(f"{10:020d}.checkpoint.parquet")]
    assert plan(files, None).keys == ()


def test_everything_before_the_newest_old_checkpoint_goes() -> None:
    files = [
        *commits(0, 19),
        *commits(20, 25, NEW),
        f(f"{5:020d}.crc"),
        f(f"{10:020d}.checkpoint.parquet"),
        f(f"{10:020d}.crc"),
        f(f"{15:020d}.checkpoint.parquet"),
        f(f"{20:020d}.checkpoint.parquet", NEW),
        f(f"{3:020d}.{9:020d}.compacted.json"),
        f(f"{12:020d}.{16:020d}.compacted.json"),
    ]
    got = plan(files, 20)
    assert got.kept == 15
    assert got.checkpoints
    assert names(got.keys) == [
        *(f"{v:020d}.json" for v in range(3)),
        f"{3:020d}.{9:020d}.compacted.json",
        f"{3:020d}.json",
        f"{4:020d}.json",
        f"{5:020d}.crc",
        f"{5:020d}.json",
        *(f"{v:020d}.json" for v in range(6, 10)),
        f"{10:020d}.checkpoint.parquet",
        f"{10:020d}.crc",
        f"{10:020d}.json",
        *(f"{v:020d}.json" for v in range(11, 15)),
    ]
    # the kept checkpoint, its commit, and a compaction reaching past it stay
    kept = {p.path.key for p in files} - set(got.keys)
    assert f"_delta_log/{15:020d}.checkpoint.parquet" in kept
    assert f"_delta_log/{15:020d}.json" in kept
    assert f"_delta_log/{12:020d}.{16:020d}.compacted.json" in kept


def test_the_hint_bounds_the_kept_checkpoint() -> None:
    files = commits(0, 30)
    files += [f(f"{10:020d}.checkpoint.parquet"), f(f"{20:020d}.checkpoint.parquet")]
    assert plan(files, 10).kept == 10
    assert plan(files, 30).kept == 20


def test_a_young_commit_before_an_old_checkpoint_bounds_it() -> None:
    """Clock skew: version 12's commit is inside the window, so it must stay readable."""
    files = [*commits(0, 11), *commits(12, 12, NEW), *commits(13, 30)]
    files += [f(f"{10:020d}.checkpoint.parquet"), f(f"{20:020d}.checkpoint.parquet")]
    got = plan(files, 20)
    assert got.kept == 10
    assert max(LogPath.parse(n).version for n in names(got.keys)) == 9  # type: ignore[union-attr]


def test_young_files_before_the_kept_checkpoint_stay() -> None:
    files = [*commits(0, 20), f(f"{10:020d}.checkpoint.parquet"), f(f"{5:020d}.crc", NEW)]
    assert f"{5:020d}.crc" not in names(plan(files, 10).keys)


def test_multi_part_counts_only_complete_and_old() -> None:
    part = "{:020d}.checkpoint.{:010d}.{:010d}.parquet"
    files = [
        *commits(0, 30),
        f(part.format(10, 1, 2)),
        f(part.format(10, 2, 2)),
        f(part.format(20, 1, 2)),  # part 2 missing
        f(part.format(25, 1, 2)),
        f(part.format(25, 2, 2), NEW),  # one part young
    ]
    got = plan(files, 25)
    assert got.kept == 10
    assert names(got.keys)[-1] == f"{9:020d}.json"
    files.append(f(part.format(20, 2, 2)))
    got = plan(files, 25)
    assert got.kept == 20
    assert part.format(10, 1, 2) in names(got.keys) and part.format(10, 2, 2) in names(got.keys)


def test_gaps_before_the_kept_checkpoint_are_fine() -> None:
    files = [*commits(4, 7), *commits(10, 20), f(f"{10:020d}.checkpoint.parquet")]
    assert names(plan(files, 10).keys) == [f"{v:020d}.json" for v in range(4, 8)]


def test_a_gap_after_the_kept_checkpoint_refuses() -> None:
    files = [*commits(0, 14), *commits(16, 20), f(f"{10:020d}.checkpoint.parquet")]
    with pytest.raises(CorruptLogError, match="commit 15 is missing"):
        plan(files, 10)


def test_v2_checkpoints_and_their_sidecars() -> None:
    files = [
        *commits(0, 20),
        f(f"{10:020d}.checkpoint.{UUID}.parquet"),
        f(f"{20:020d}.checkpoint.{UUID}.json"),
        f(f"{20:020d}.checkpoint.parquet"),
    ]
    got = plan(files, 20)
    assert got.kept == 20
    assert f"{10:020d}.checkpoint.{UUID}.parquet" in names(got.keys)
    sources = [p.name for p in sidecar_sources(files, 20)]
    assert sources == [f"{20:020d}.checkpoint.{UUID}.json", f"{20:020d}.checkpoint.parquet"]
    sidecars = [("a.parquet", OLD), ("b.parquet", OLD), ("c.parquet", NEW)]
    assert expired_sidecars(sidecars, {"b.parquet"}, cutoff_ms=CUTOFF) == ["a.parquet"]
