"""How ``rlcd verify`` prints its report: counts per half, one line per problem naming the file,
and the verdict with the exit code."""

from __future__ import annotations

import io

from rlcd.cli.report import print_verify
from rlcd.operations.verify import CommitCheck, FileProblem, FilesCheck, VerifyReport


def _printed(report: VerifyReport, exit_code: int | None = None) -> list[str]:
    out = io.StringIO()
    print_verify(report, out, exit_code=exit_code)
    return out.getvalue().splitlines()


def test_a_failed_verification_lists_each_problem_under_its_half() -> None:
    """File problems sit under the files line, tag problems under their commit; skipped
    commits are counted apart from failed ones, and the last line gives the count and code."""
    files = FilesCheck(
        version=12,
        files=40,
        dvs=6,
        footers=1,
        problems=(FileProblem("a.parquet", "data file is missing"),),
    )
    vacuumed = CommitCheck(5, outputs=1, outputs_skipped=1, sources_skipped=4)
    broken = CommitCheck(9, outputs=2, sources_checked=8, problems=["source b.parquet differs"])
    report = VerifyReport("s3://bucket/t", 12, files, (vacuumed, broken))
    assert _printed(report, exit_code=1) == [
        "s3://bucket/t at version 12",
        "files: 40 live files checked (6 deletion vectors, 1 footer read): 1 problem",
        "  problem: a.parquet: data file is missing",
        "tags: 2 tagged commits: 0 ok, 1 skipped (gone from storage), 1 failed",
        "  version 5: skipped: 1 outputs (1 gone from storage), 0 sources checked, "
        "4 skipped (gone from storage)",
        "  version 9: FAILED: 2 outputs, 8 sources checked, 0 skipped",
        "    problem: source b.parquet differs",
        "verification FAILED: 2 problems (exit 1)",
    ]


def test_a_half_not_asked_for_says_so() -> None:
    """With only the files half run, the tags half reads "not checked", and a clean table
    "verified"."""
    files = FilesCheck(version=3, files=1, dvs=0, footers=0, problems=())
    assert _printed(VerifyReport("file:///t", 3, files, None), exit_code=0) == [
        "file:///t at version 3",
        "files: 1 live file checked (0 deletion vectors): 0 problems",
        "tags: not checked",
        "verified (exit 0)",
    ]


def test_a_skipped_commit_is_not_a_failure() -> None:
    """A commit whose every file is gone is "skipped" and the table still verifies."""
    check = CommitCheck(5, outputs=1, sources_skipped=3)
    report = VerifyReport("file:///t", 7, None, (check,))
    assert check.status == "skipped" and report.ok
    assert _printed(report)[-1] == "verified"


def test_untagged_sources_are_counted_as_not_checked() -> None:
    """A partly tagged commit verifies: its untagged sources are named as not checked, with
    the rows of the output no tagged run claims as a note."""
    note = "output t.parquet: 20 of its 60 rows are in no tagged run: not checked"
    check = CommitCheck(4, outputs=1, sources_checked=2, sources_untagged=1, notes=[note])
    report = VerifyReport("file:///t", 4, None, (check,))
    assert check.status == "ok" and report.ok
    assert _printed(report)[-4:] == [
        "tags: 1 tagged commit: 1 ok, 0 skipped, 0 failed",
        "  version 4: ok: 1 outputs, 2 sources checked, 0 skipped, 1 untagged (not checked)",
        f"    note: {note}",
        "verified",
    ]


def test_a_deep_check_counts_the_files_read_in_full() -> None:
    """A deep files half says how many files it read in full; a plain one says nothing of it."""
    files = FilesCheck(version=3, files=2, dvs=1, footers=0, problems=(), read=2)
    assert _printed(VerifyReport("file:///t", 3, files, None))[1] == (
        "files: 2 live files checked (1 deletion vector, 2 read in full): 0 problems"
    )
