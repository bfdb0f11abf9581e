"""The ``rlcd`` command line as a user runs it: subprocesses, output and exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cli import in_command, rlcd
from tests.integration.tables import S3Mirror, append, batch, delta_rs_rows, partitioned

pytestmark = pytest.mark.e2e


def test_dry_run_then_compact_then_verify(tmp_path: Path) -> None:
    """--dry-run prints the plan and writes nothing; compact commits; verify passes; exit 0."""
    partitioned(tmp_path)
    log_before = sorted(p.name for p in (tmp_path / "_delta_log").iterdir())
    dry = rlcd("compact", str(tmp_path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "2 bins, 8 files" in dry.stdout and "part=a" in dry.stdout
    assert sorted(p.name for p in (tmp_path / "_delta_log").iterdir()) == log_before
    rows = delta_rs_rows(tmp_path)
    done = rlcd("compact", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "committed version 8: 8 files (" in done.stdout
    assert "; 2 bins: 2 committed\n" in done.stdout
    assert done.stdout.count(": committed: 4 files -> 1 file\n") == 2
    assert delta_rs_rows(tmp_path) == rows
    verified = rlcd("verify", tmp_path.as_uri())
    assert verified.returncode == 0, verified.stdout
    assert "version 8: ok: 2 outputs, 8 sources checked" in verified.stdout
    again = rlcd("compact", str(tmp_path))
    assert again.returncode == 0 and "nothing to compact" in again.stdout


def test_s3_through_the_standard_aws_environment(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """The CLI reaches S3 from AWS_ENDPOINT_URL_S3 / AWS_REGION alone, no rlcd flags."""
    partitioned(tmp_path / "t")
    uri = S3Mirror(moto_endpoint, s3_bucket).upload(tmp_path / "t", "cli/t")
    env = {
        "AWS_ENDPOINT_URL_S3": moto_endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    done = rlcd("compact", uri, env=env)
    assert done.returncode == 0, done.stderr
    assert "committed version 8" in done.stdout
    assert rlcd("verify", uri, env=env).returncode == 0


def test_s3_without_credentials_is_a_configuration_error(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """No credentials anywhere in the AWS chain: exit 2, naming the table and where the chain
    looks, not a storage failure."""
    partitioned(tmp_path / "t")
    uri = S3Mirror(moto_endpoint, s3_bucket).upload(tmp_path / "t", "cli/t")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL_S3=moto_endpoint,
        AWS_REGION="us-east-1",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    done = subprocess.run(
        [sys.executable, "-m", "rlcd", "compact", uri],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert uri in done.stderr and "AWS_PROFILE" in done.stderr


def test_unsupported_writer_feature_is_refused_by_name(tmp_path: Path) -> None:
    """A table needing a writer feature rlcd lacks exits 3 naming it, and nothing is written
    but the run's lease, released (its empty folder stays: local folders are kept)."""
    partitioned(tmp_path)
    commit = tmp_path / "_delta_log" / "00000000000000000008.json"
    commit.write_text(
        json.dumps(
            {
                "protocol": {
                    "minReaderVersion": 1,
                    "minWriterVersion": 7,
                    "writerFeatures": ["rowTracking", "domainMetadata", "appendOnly"],
                }
            }
        )
        + "\n"
    )
    files = sorted(str(p) for p in tmp_path.rglob("*"))
    result = rlcd("compact", str(tmp_path))
    assert result.returncode == 3
    assert "rowTracking" in result.stderr and str(tmp_path) in result.stderr
    assert sorted(str(p) for p in tmp_path.rglob("*") if p.name != "_rlcd") == files
    assert list((tmp_path / "_rlcd").iterdir()) == []


def test_bad_arguments_and_tables(tmp_path: Path) -> None:
    """A bad size is a usage error (2); a directory that is no Delta table is exit 3."""
    partitioned(tmp_path / "t")
    bad = rlcd("compact", str(tmp_path / "t"), "--target-size", "lots")
    assert bad.returncode == 2 and "size" in bad.stderr
    (tmp_path / "empty").mkdir()
    missing = rlcd("verify", str(tmp_path / "empty"))
    assert missing.returncode == 3 and "no Delta log" in missing.stderr


def test_demo_command_runs_the_whole_job(tmp_path: Path) -> None:
    """`rlcd demo` builds, compacts and verifies a table and says the rows are identical."""
    result = rlcd(
        "demo", "--one-shot", "--path", str(tmp_path / "demo"), "--files", "9", "--rows", "300"
    )
    assert result.returncode == 0, result.stderr
    assert "verified" in result.stdout and "identical" in result.stdout
    again = rlcd(
        "demo", "--one-shot", "--path", str(tmp_path / "demo"), "--files", "3", "--rows", "4"
    )
    assert again.returncode == 0, again.stderr  # an earlier demo table is recreated


def test_daemon_demo_keeps_its_files_in_the_folder_it_names(tmp_path: Path) -> None:
    """The daemon demo leaves its config, the daemon's log and a copy of each table in its
    folder, names it last, and shows each table's bins by outcome (reconciled and aborted
    too, at 0) beside the DV deletes the writer made while the daemon ran."""
    folder = tmp_path / "demo"
    result = rlcd("demo", "--path", str(folder), "--files", "6", "--seconds", "3", timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.endswith(f"the tables as they ended are in {folder}\n"), result.stdout
    assert "[[discover]]" in (folder / "rlcd.toml").read_text()
    assert '"event": "bin_committed"' in (folder / "daemon.log").read_text()
    for name in ("events", "orders", "clicks"):
        assert delta_rs_rows(folder / "tables" / name), name
    assert result.stdout.count("DV deletes while the daemon ran\n") >= 2  # events, clicks: 0
    assert result.stdout.count(" reconciled by remap") == 3
    assert result.stdout.count(" aborted") >= 3
    storage = re.findall(
        r"storage (\d+) objects, .*\((\d+) files? deleted\) (\d+) objects", result.stdout
    )
    assert len(storage) == 3 and all(int(a) > int(b) > 0 for a, _, b in storage), result.stdout
    assert all(int(deleted) > 0 for _, deleted, _ in storage), result.stdout
    assert '"event"' not in result.stdout  # the vacuum's short-retention warning is in the text


def test_demo_never_deletes_what_it_did_not_make(tmp_path: Path) -> None:
    """A --path holding anything but a demo table (or demo folder) is refused (exit 2) and
    left as it was; so are arguments the demo cannot run with."""
    (tmp_path / "thesis.txt").write_text("years of work")
    result = rlcd("demo", "--one-shot", "--path", str(tmp_path), "--files", "3", "--rows", "4")
    assert result.returncode == 2 and "is not a demo table rlcd made" in result.stderr
    daemon_demo = rlcd("demo", "--path", str(tmp_path), "--files", "3")
    assert daemon_demo.returncode == 2 and "is not a demo folder rlcd made" in daemon_demo.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["thesis.txt"]
    for args in (("--files", "2"), ("--rows", "0")):
        bad = rlcd("demo", "--one-shot", "--path", str(tmp_path / "d"), *args)
        assert bad.returncode == 2 and "the demo needs" in bad.stderr, bad.stderr


@pytest.mark.parametrize(("environment", "pool"), [({}, "jemalloc"), ({"X": "system"}, "system")])
def test_the_command_runs_arrow_on_jemalloc_unless_told_otherwise(
    environment: dict[str, str], pool: str
) -> None:
    """The command's process settings are made before pyarrow loads, and yield to the user's."""
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if environment:
        env["ARROW_DEFAULT_MEMORY_POOL"] = environment["X"]
    done = in_command("import pyarrow; print(pyarrow.default_memory_pool().backend_name)", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == pool


def test_the_commands_compaction_allocates_in_jemalloc(tmp_path: Path) -> None:
    """In the command's process a compaction runs on the pool chosen at start-up: pyarrow's
    default stays jemalloc, and jemalloc is where the rewrite's memory came from."""
    partitioned(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    probe = (
        "import anyio, pyarrow as pa\n"
        "from rlcd.compaction.compact import compact_table\n"
        "from rlcd.compaction.policy import CompactionPolicy\n"
        "from rlcd.storage import LocalStore\n"
        "async def compact():\n"
        f"    async with LocalStore({str(tmp_path)!r}) as store:\n"
        "        return await compact_table(store, CompactionPolicy())\n"
        "report = anyio.run(compact)\n"
        "assert report.committed and not report.failed, report\n"
        "print(pa.default_memory_pool().backend_name, pa.jemalloc_memory_pool().max_memory() > 0)"
    )
    done = in_command(probe, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1].split() == ["jemalloc", "True"]  # after the log lines


def test_the_command_loads_no_numpy() -> None:
    """pyarrow, which imports numpy whenever it is installed (it is, here: the tests use it),
    loads without it in the command's process and works; numpy's import raises there."""
    probe = (
        "import sys, pyarrow as pa, pyarrow.compute as pc\n"
        "assert pc.sum(pa.array([1, 2])).as_py() == 3\n"
        "try:\n"
        "    import numpy\n"
        "except ImportError:\n"
        "    print('no numpy', sys.modules.get('numpy'))"
    )
    done = in_command(probe)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "no numpy None\n"


def test_a_library_user_keeps_numpy() -> None:
    """Importing rlcd's command line as a library makes no process setting: numpy still loads
    with pyarrow."""
    code = "import rlcd.cli.main, pyarrow, sys; print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "True\n"


@pytest.mark.parametrize(("args", "code"), [((), 0), (("--target-size", "1m"), 2)])
def test_the_command_exits_without_teardown_but_with_all_its_output(
    tmp_path: Path, args: tuple[str, ...], code: int
) -> None:
    """The command skips the interpreter's teardown (no atexit handler runs), yet its exit code
    is the command's and its output, block-buffered into files, arrives whole."""
    partitioned(tmp_path / "t")
    script = (
        "import atexit, sys; atexit.register(print, 'torn down', file=sys.stderr); "
        "sys.argv[0] = 'rlcd'; from rlcd.cli.main import run; run()"
    )
    with (tmp_path / "out").open("w") as out, (tmp_path / "err").open("w") as err:
        done = subprocess.run(
            [sys.executable, "-c", script, "compact", str(tmp_path / "t"), *args],
            stdout=out,
            stderr=err,
            timeout=120,
        )
    assert done.returncode == code
    stdout, stderr = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert "torn down" not in stderr
    if code == 0:
        assert stdout.endswith("\n") and "committed version 8: 8 files (" in stdout
    else:
        assert "1MiB" in stderr and stdout == ""


def test_logging_options_work_after_the_subcommand_too(tmp_path: Path) -> None:
    """--log-level and --log-format are taken before or after the subcommand alike."""
    partitioned(tmp_path)
    done = rlcd("compact", str(tmp_path), "--log-level", "info", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line)["event"] for line in done.stderr.splitlines()]
    assert "bins_committed" in events
    quiet = rlcd("--log-level", "error", "compact", str(tmp_path))
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_help_is_plain_text_with_codecs_and_exit_codes() -> None:
    """--help shows no reST markup, lists the exit codes, and compact's lists the codecs."""
    top = rlcd("--help")
    compact = rlcd("compact", "--help")
    for text in (top.stdout, compact.stdout):
        assert "``" not in text and ":class:" not in text
        assert "Exit codes:" in text and "143 by SIGTERM" in text
    assert "{gzip,none,snappy,zstd}" in compact.stdout
    bad = rlcd("compact", "t", "--codec", "lz4")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_every_warning_appears_once(tmp_path: Path) -> None:
    """A bin that fails is said once, in the report on stdout, not again as a log line on
    stderr; --log-format json asks for every event, and gets the machine line too."""
    partitioned(tmp_path)
    victim = next((tmp_path / "part=a").iterdir())
    victim.unlink()
    done = rlcd("compact", str(tmp_path))
    assert done.returncode == 1
    assert "; 2 bins: 1 committed, 1 failed\n" in done.stdout
    assert done.stdout.count(": failed: data file is missing") == 1 and victim.name in done.stdout
    assert done.stderr == ""
    machine = rlcd("compact", str(tmp_path), "--log-format", "json")
    assert [json.loads(line)["event"] for line in machine.stderr.splitlines()] == ["bin_failed"]


def test_ambiguous_sizes_are_refused_and_real_units_honoured(tmp_path: Path) -> None:
    """`--target-size 1m` is refused naming both readings; 1MB and 1MiB mean what they say."""
    partitioned(tmp_path)
    bad = rlcd("compact", str(tmp_path), "--target-size", "1m", "--dry-run")
    assert bad.returncode == 2 and "1MiB" in bad.stderr and "1MB" in bad.stderr
    for flag, shown in (("2MB", "1.9 MiB"), ("2MiB", "2.0 MiB")):
        plan = rlcd("compact", str(tmp_path), "--target-size", flag, "--dry-run")
        assert plan.returncode == 0 and f"(target {shown})" in plan.stdout, plan.stderr


def test_min_copy_row_group_sets_which_row_groups_are_copied(tmp_path: Path) -> None:
    """The default re-encodes the small row groups of small files; with a smaller
    `--min-copy-row-group` the plan copies them; a bad size is refused."""
    partitioned(tmp_path)
    default = rlcd("compact", str(tmp_path), "--dry-run")
    assert default.returncode == 0 and "copies" not in default.stdout, default.stdout
    small = rlcd("compact", str(tmp_path), "--dry-run", "--min-copy-row-group", "100B")
    assert small.returncode == 0 and "copies 4 row groups" in small.stdout, small.stdout
    bad = rlcd("compact", str(tmp_path), "--dry-run", "--min-copy-row-group", "1k")
    assert bad.returncode == 2 and "1KiB" in bad.stderr, bad.stderr


def test_copy_plans_sets_how_many_bins_a_dry_run_reads_the_footers_of(tmp_path: Path) -> None:
    """`--copy-plans 1` reads the first bin's footers only: the other bin prints no copy part
    and a line says how to read it; `--copy-plans all` reads both; a bad count is refused."""
    partitioned(tmp_path)
    copy_all = ("--dry-run", "--min-copy-row-group", "100B")
    one = rlcd("compact", str(tmp_path), *copy_all, "--copy-plans", "1")
    assert one.returncode == 0, one.stderr
    bins = [line for line in one.stdout.splitlines() if line.startswith("  bin ")]
    assert len(bins) == 2 and "copies 4 row groups" in bins[0], one.stdout
    assert "copies" not in bins[1], one.stdout
    assert "  copy plans read for 1 bin; in all, copies 4 row groups (" in one.stdout
    assert "not read for the other 1 bin that may copy" in one.stdout
    assert "--copy-plans all reads every one" in one.stdout
    every = rlcd("compact", str(tmp_path), *copy_all, "--copy-plans", "all")
    assert every.returncode == 0, every.stderr
    assert every.stdout.count("; copies 4 row groups") == 2, every.stdout
    assert "copy plans read for 2 bins; in all, copies 8 row groups" in every.stdout
    assert "not read" not in every.stdout
    bad = rlcd("compact", str(tmp_path), *copy_all, "--copy-plans", "-1")
    assert bad.returncode == 2 and "not a count of bins or 'all'" in bad.stderr, bad.stderr


def test_partitions_read_in_the_tables_column_order(tmp_path: Path) -> None:
    """Files whose log entries list their partition values in different orders are printed
    alike, in the table's partition column order (region before day), in the plan and in the
    report of each bin."""
    for i in range(8):
        region, day = ["us", "eu"][i % 2], "2026-11-30"
        extra = {"region": [region] * 50, "day": [day] * 50}
        append(tmp_path, batch(i * 50, 50, **extra), partition_by=["region", "day"])
    for commit in sorted((tmp_path / "_delta_log").glob("*.json"))[1::2]:  # reorder half
        lines = [json.loads(line) for line in commit.read_text().splitlines()]
        for line in lines:
            if "add" in line:
                values = line["add"]["partitionValues"]
                line["add"]["partitionValues"] = dict(reversed(values.items()))
        commit.write_text("".join(json.dumps(line) + "\n" for line in lines))
    for args in (["--dry-run"], []):
        done = rlcd("compact", str(tmp_path), *args)
        assert done.returncode == 0, done.stderr
        bins = [line for line in done.stdout.splitlines() if line.startswith("  bin ")]
        assert len(bins) == 2, done.stdout
        assert all(
            "  region=eu, day=2026-11-30: " in b or "  region=us, day=2026-11-30: " in b
            for b in bins
        ), done.stdout
