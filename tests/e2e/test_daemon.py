"""``rlcd run`` as a subprocess against moto's S3: convergence under concurrent writers,
reloads, discovery, systemd notifications, SIGTERM mid-rewrite and ``kill -9`` at the worst
moments."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import boto3
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rlcd.cli.daemon_demo import DEMO_TABLES, DaemonProcess, TableSpec, Workload, wait_converged
from rlcd.compaction._orphans import is_own_file, json_references, referenced
from tests.contract.faultproxy import Fault, FaultProxy
from tests.integration.tables import append, batch, live_files

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SECRET = f"e2e-secret-{uuid.uuid4().hex}"


def config_text(endpoint: str, bucket: str, *, extra: str = "", grace: str = "5s") -> str:
    return f"""
[daemon]
poll_interval = "300ms"
shutdown_grace = "{grace}"
orphan_grace = "1s"
lease_ttl = "1s"  # a killed daemon's lease keeps the next one off its tables this long
[s3]
endpoint_url = "{endpoint}"
region = "us-east-1"
addressing_style = "path"
[log]
format = "json"
level = "info"
[metrics]
listen = "127.0.0.1:0"
[policy]
target_file_size = "8MiB"
min_small_files = 3
min_interval = "0s"
min_file_age = "0s"
[[discover]]
prefix = "s3://{bucket}/tables"
interval = "1s"
{extra}
"""


def start(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> DaemonProcess:
    config = tmp_path / "rlcd.toml"
    config.write_text(text)
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": SECRET}
    return DaemonProcess(config, env={**creds, **(env or {})}, log=tmp_path / "daemon.log")


async def until(check: Callable[[], bool], *, within_s: float, what: str) -> None:
    with anyio.move_on_after(within_s):
        while True:
            if check():
                return
            await anyio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def event(daemon: DaemonProcess, name: str, **fields: Any) -> bool:
    return any(
        e.get("event") == name and all(e.get(k) == v for k, v in fields.items())
        for e in daemon.events()
    )


class NotifySocket:
    """A unix datagram socket standing in for systemd's, collecting what the daemon sends."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.messages: list[str] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(self.path)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                self.messages.append(self._sock.recv(4096).decode())
            except TimeoutError:
                continue

    def lines(self) -> list[str]:
        return [line for m in self.messages for line in m.splitlines()]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    try:
        yield sock
    finally:
        sock.close()


def listening_port(daemon: DaemonProcess) -> int:
    return int(next(e["port"] for e in daemon.events() if e.get("event") == "metrics_listening"))


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def s3_keys(endpoint: str, bucket: str, prefix: str) -> list[str]:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def uploads(endpoint: str, bucket: str) -> int:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    return len(client.list_multipart_uploads(Bucket=bucket).get("Uploads", []))


def unreferenced_rlcd_files(w: Workload, spec: TableSpec) -> list[str]:
    """rlcd's files in the bucket that no commit of the table's log names (orphans)."""
    client = boto3.client("s3", endpoint_url=w.endpoint, region_name="us-east-1")
    prefix = f"{w.prefix}/{spec.name}/"
    keys = [k[len(prefix) :] for k in s3_keys(w.endpoint, w.bucket, prefix)]
    commits = [k for k in keys if k.startswith("_delta_log/") and k.endswith(".json")]
    bodies = [client.get_object(Bucket=w.bucket, Key=prefix + k)["Body"].read() for k in commits]
    refs = referenced(w.uri(spec), (r for body in bodies for r in json_references(body)))
    return [k for k in keys if is_own_file(k) and not refs.name(k)]


async def test_tables_converge_under_concurrent_writers_reloads_and_discovery(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str, notify_socket: NotifySocket
) -> None:
    """Three tables with concurrent appenders and DV deleters converge and read back exactly
    as the writers left them; a table created after start is discovered; a SIGHUP with a bad
    file keeps the old config, one with a good file adds a table; /metrics parses and /healthz
    answers; systemd hears READY, STATUS, WATCHDOG at the interval and STOPPING; SIGTERM exits
    0; the secret key appears nowhere in the output."""
    w = Workload(s3_bucket, moto_endpoint, DEMO_TABLES)
    for spec in w.specs:
        for _ in range(4):
            await w.append(spec)
    env = {"NOTIFY_SOCKET": notify_socket.path, "WATCHDOG_USEC": "1000000"}
    text = config_text(moto_endpoint, s3_bucket)
    daemon = start(tmp_path, text, env)
    try:
        await until(lambda: "READY=1" in notify_socket.lines(), within_s=30, what="READY=1")
        await w.run(4.0)
        late = Workload(s3_bucket, moto_endpoint, [TableSpec("late")], seed=11)
        for _ in range(4):
            await late.append(late.specs[0])
        await until(
            lambda: event(daemon, "table_added", table=late.uri(late.specs[0])),
            within_s=30,
            what="the late table to be discovered",
        )
        config = tmp_path / "rlcd.toml"
        config.write_text(text.replace("min_small_files = 3", 'min_small_files = "three"'))
        daemon.signal(signal.SIGHUP)
        await until(
            lambda: event(daemon, "config_reload_failed"), within_s=20, what="a refused reload"
        )
        failure = next(e for e in daemon.events() if e.get("event") == "config_reload_failed")
        assert "policy.min_small_files" in failure["error"]
        extra = Workload(s3_bucket, moto_endpoint, [TableSpec("extra")], seed=12, prefix="other")
        for _ in range(4):
            await extra.append(extra.specs[0])
        added = f'[[table]]\nuri = "s3://{s3_bucket}/other/extra"\n'
        config.write_text(config_text(moto_endpoint, s3_bucket, extra=added))
        daemon.signal(signal.SIGHUP)
        await until(
            lambda: event(daemon, "table_added", table=f"s3://{s3_bucket}/other/extra"),
            within_s=20,
            what="the table added by SIGHUP",
        )
        for workload in (w, late, extra):
            assert await wait_converged(workload, config, within_s=60)
        port = listening_port(daemon)
        status, body = await anyio.to_thread.run_sync(get, port, "/healthz")
        assert status == 200 and b'"status":"ok"' in body
        status, body = await anyio.to_thread.run_sync(get, port, "/metrics")
        families = {f.name for f in text_string_to_metric_families(body.decode())}
        assert {"rlcd_bins_committed", "rlcd_s3_requests", "rlcd_bin_duration_seconds"} <= families
        daemon.signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(daemon.wait, 30.0) == 0
    finally:
        daemon.kill()
    for workload in (w, late, extra):
        for spec in workload.specs:
            assert await anyio.to_thread.run_sync(workload.check, spec), spec.name
    lines = notify_socket.lines()
    assert any(line.startswith("STATUS=") for line in lines)
    assert lines.count("WATCHDOG=1") >= 2
    assert "STOPPING=1" in lines
    output = daemon.log.read_text()
    assert SECRET not in output
    assert event(daemon, "bin_committed") and event(daemon, "daemon_stopped")


async def test_sigterm_during_a_rewrite_exits_cleanly_within_the_grace(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """SIGTERM while a bin is rewriting (its source reads hang) cancels it after the grace
    period, deletes what it wrote and exits 0; the table is as the writer left it, with no
    rlcd file and no upload left behind."""
    spec = TableSpec("slow")
    w = Workload(s3_bucket, moto_endpoint, [spec])
    for _ in range(4):
        await w.append(spec)
    proxy = FaultProxy(moto_endpoint, hang_s=60)
    with proxy.running():
        proxy.inject(Fault.HANG, times=None, method="GET", contains="/part-")
        daemon = start(tmp_path, config_text(proxy.url, s3_bucket, grace="1s"))
        try:
            await until(lambda: proxy.count("GET", "/part-") > 0, within_s=30, what="a rewrite")
            daemon.signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(daemon.wait, 20.0)
        finally:
            daemon.kill()
    assert code == 0
    assert event(daemon, "drain_cancelled")
    assert not event(daemon, "bin_committed")
    assert uploads(moto_endpoint, s3_bucket) == 0
    assert unreferenced_rlcd_files(w, spec) == []
    assert await anyio.to_thread.run_sync(w.check, spec)


async def test_sigterm_lets_a_bin_in_flight_finish_within_the_grace(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """SIGTERM while a bin is slowed down (one source read hangs a moment) lets it finish and
    commit within the grace period, then exits 0; no new run starts."""
    spec = TableSpec("drain")
    w = Workload(s3_bucket, moto_endpoint, [spec])
    for _ in range(4):
        await w.append(spec)
    proxy = FaultProxy(moto_endpoint, hang_s=2)
    with proxy.running():
        proxy.inject(Fault.HANG, times=1, method="GET", contains="/part-")
        daemon = start(tmp_path, config_text(proxy.url, s3_bucket, grace="60s"))
        try:
            await until(lambda: proxy.count("GET", "/part-") > 0, within_s=30, what="a rewrite")
            daemon.signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(daemon.wait, 60.0)
        finally:
            daemon.kill()
    assert code == 0
    assert event(daemon, "bin_committed") and not event(daemon, "drain_cancelled")
    assert unreferenced_rlcd_files(w, spec) == []
    assert await anyio.to_thread.run_sync(w.check, spec)


async def test_kill_9_during_a_rewrite_and_a_commit_then_restart(
    tmp_path: Path, s3_bucket: str, moto_endpoint: str
) -> None:
    """kill -9 while a bin rewrites, and again while its commit is in flight (the output is
    written, the commit never lands), leaves the table readable; the next start removes the
    orphaned output (once the killed daemon's lease expired), compacts, and the table reads
    back exactly, nothing it references lost."""
    spec = TableSpec("crash", dvs=True)
    w = Workload(s3_bucket, moto_endpoint, [spec])
    for _ in range(4):
        await w.append(spec)
    await w.delete(spec)
    version = 5  # four appends and a delete: the compaction commits version 5
    commit = f"_delta_log/{version:020d}.json"
    proxy = FaultProxy(moto_endpoint, hang_s=60)
    with proxy.running():
        for fault_method, contains in (("GET", "/part-"), ("PUT", commit)):
            proxy.reset()
            proxy.inject(Fault.HANG, times=None, method=fault_method, contains=contains)
            (tmp_path / "daemon.log").unlink(missing_ok=True)
            daemon = start(tmp_path, config_text(proxy.url, s3_bucket))
            try:
                await until(
                    lambda m=fault_method, c=contains: proxy.count(m, c) > 0,
                    within_s=30,
                    what=f"a {fault_method} of {contains}",
                )
            finally:
                daemon.kill()
            assert await anyio.to_thread.run_sync(w.check, spec)
    orphans = unreferenced_rlcd_files(w, spec)
    assert orphans, "the killed commit left its output behind"
    await anyio.sleep(1.5)  # older than the orphan grace
    (tmp_path / "daemon.log").unlink()
    daemon = start(tmp_path, config_text(moto_endpoint, s3_bucket))
    try:
        await until(lambda: event(daemon, "orphans_removed"), within_s=30, what="the cleanup")
        assert await wait_converged(w, tmp_path / "rlcd.toml", within_s=30)
        daemon.signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(daemon.wait, 30.0) == 0
    finally:
        daemon.kill()
    assert unreferenced_rlcd_files(w, spec) == []
    assert uploads(moto_endpoint, s3_bucket) == 0
    assert await anyio.to_thread.run_sync(w.check, spec)


def rlcd_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlcd", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


LOCAL_CONFIG = """
[metrics]
listen = ""
[[discover]]
prefix = "tables"
[discover.policy]
min_small_files = 2
min_interval = "0s"
min_file_age = "0s"
"""


def test_config_check_run_once_and_status_on_local_tables(tmp_path: Path) -> None:
    """config check prints the effective policies (exit 0) or names every bad key (exit 2);
    run --once compacts the due tables and exits 0; status shows each table's version, files,
    backlog and the compaction rlcd committed."""
    for name in ("a", "b"):
        for i in range(3):
            append(tmp_path / "tables" / name, batch(i * 10, 10))
    (tmp_path / "rlcd.toml").write_text(LOCAL_CONFIG)
    check = rlcd_cli("config", "check", "rlcd.toml", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "due at 2 small files in a partition" in check.stdout
    bad_text = LOCAL_CONFIG.replace("min_small_files = 2", "min_small = 2")
    (tmp_path / "bad.toml").write_text(bad_text.replace('min_interval = "0s"', "min_interval = -1"))
    bad = rlcd_cli("config", "check", "bad.toml", cwd=tmp_path)
    assert bad.returncode == 2 and "discover[0].policy.min_small" in bad.stderr
    assert "bad.toml: discover[0].policy.min_interval: must be a duration >= 0" in bad.stderr
    before = rlcd_cli("status", "--config", "rlcd.toml", cwd=tmp_path)
    assert before.returncode == 0, before.stderr
    assert "version 2, 3 files, 3 to compact" in before.stdout
    assert "last rlcd compaction: none recently" in before.stdout
    once = rlcd_cli("run", "--config", "rlcd.toml", "--once", cwd=tmp_path)
    assert once.returncode == 0, once.stdout + once.stderr
    assert once.stdout.count('"event": "bin_committed"') == 2
    after = rlcd_cli("status", "--config", "rlcd.toml", cwd=tmp_path)
    assert after.stdout.count("version 3, 1 file, 0 to compact") == 2
    assert after.stdout.count("last rlcd compaction: version 3 at ") == 2
    for name in ("a", "b"):
        assert live_files(tmp_path / "tables" / name) == 1


def test_run_once_with_an_unreadable_table_compacts_the_others_and_exits_3(
    tmp_path: Path,
) -> None:
    """One pass over a healthy and an unreadable table: the healthy one is compacted, the
    other is named in the log, and the pass exits 3 (the table cannot be read), as status
    does naming it."""
    for name in ("good", "broken"):
        for i in range(3):
            append(tmp_path / "tables" / name, batch(i * 10, 10))
    last = tmp_path / "tables" / "broken" / "_delta_log" / f"{2:020d}.json"
    last.write_text('{"add": {"path": ')  # a commit cut short
    (tmp_path / "rlcd.toml").write_text(LOCAL_CONFIG)
    broken_before = sorted(p.name for p in (tmp_path / "tables" / "broken").rglob("*"))
    once = rlcd_cli("run", "--config", "rlcd.toml", "--once", cwd=tmp_path)
    assert once.returncode == 3, once.stdout + once.stderr
    assert once.stdout.count('"event": "bin_committed"') == 1
    failed = [line for line in once.stdout.splitlines() if '"event": "table_failed"' in line]
    assert len(failed) == 1 and "tables/broken" in failed[0], once.stdout
    assert "malformed commit" in failed[0] and "00000000000000000002.json" in failed[0]
    assert live_files(tmp_path / "tables" / "good") == 1
    broken = tmp_path / "tables" / "broken"  # its cleanup's lease was released: an empty folder
    assert sorted(p.name for p in broken.rglob("*") if p.name != "_rlcd") == broken_before
    assert not any((broken / "_rlcd").glob("*"))
    status = rlcd_cli("status", "--config", "rlcd.toml", cwd=tmp_path)
    assert status.returncode == 3, status.stdout + status.stderr
    assert "cannot read: malformed commit" in status.stdout
