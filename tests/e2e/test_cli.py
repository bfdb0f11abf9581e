"""The ``rlcd`` command line as a user runs it: subprocesses, output and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.tables import S3Mirror, delta_rs_rows, partitioned

pytestmark = pytest.mark.e2e


def rlcd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlcd", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


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
    assert "committed version 8: 2 bins, 8 files" in done.stdout
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
    """A table needing a writer feature rlcd lacks exits 3 naming it, and nothing is written."""
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
    assert sorted(str(p) for p in tmp_path.rglob("*")) == files


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


def test_demo_never_deletes_what_it_did_not_make(tmp_path: Path) -> None:
    """A --path holding anything but a demo table is refused (exit 2) and left as it was; so
    are arguments the demo cannot run with."""
    (tmp_path / "thesis.txt").write_text("years of work")
    result = rlcd("demo", "--one-shot", "--path", str(tmp_path), "--files", "3", "--rows", "4")
    assert result.returncode == 2 and "is not a demo table rlcd made" in result.stderr
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
    code = "import rlcd.cli.main, pyarrow; print(pyarrow.default_memory_pool().backend_name)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == pool
