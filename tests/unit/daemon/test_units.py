"""The shipped systemd units: ``systemd-analyze verify`` accepts them without a warning, and
each directive the service relies on is there with its value."""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from rlcd.cli.exit_codes import EXIT_USAGE
from rlcd.compaction.policy import parse_duration
from rlcd.daemon.config import DaemonSettings

UNITS = Path(__file__).resolve().parents[3] / "systemd"
SERVICE = UNITS / "rlcd.service"
TEMPLATE = UNITS / "rlcd@.service"


def directives(path: Path) -> dict[str, list[str]]:
    """``Section.Key`` → its values in order (systemd keys may repeat)."""
    found: dict[str, list[str]] = defaultdict(list)
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        found[f"{section}.{key}"].append(value)
    return dict(found)


@pytest.mark.parametrize(
    "unit", [SERVICE, UNITS / "rlcd@3.service"], ids=["rlcd.service", "rlcd@3.service"]
)
def test_systemd_analyze_verifies_the_unit_without_a_warning(unit: Path) -> None:
    """systemd's own checker loads the unit (the template as an instance) and says nothing."""
    done = subprocess.run(
        ["/usr/bin/systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


COMMON = {
    "Service.Type": ["notify"],
    "Service.NotifyAccess": ["main"],
    "Service.ExecReload": ["/bin/kill -HUP $MAINPID"],
    "Service.EnvironmentFile": ["-/etc/rlcd/rlcd.env"],
    "Service.Restart": ["on-failure"],
    "Service.RestartPreventExitStatus": [str(EXIT_USAGE)],
    "Service.DynamicUser": ["yes"],
    "Service.NoNewPrivileges": ["yes"],
    "Service.ProtectSystem": ["strict"],
    "Service.ProtectHome": ["yes"],
    "Service.PrivateTmp": ["yes"],
    "Install.WantedBy": ["multi-user.target"],
}


@pytest.mark.parametrize("unit", [SERVICE, TEMPLATE], ids=lambda p: p.name)
@pytest.mark.parametrize("key", sorted(COMMON))
def test_each_required_directive_has_its_value(unit: Path, key: str) -> None:
    """Notify type, reload by SIGHUP, credentials file, restart policy and hardening hold."""
    assert directives(unit).get(key) == COMMON[key]


@pytest.mark.parametrize("unit", [SERVICE, TEMPLATE], ids=lambda p: p.name)
def test_the_watchdog_and_stop_timeout_fit_the_daemon(unit: Path) -> None:
    """A watchdog is set, and systemd waits longer than the default shutdown grace."""
    d = directives(unit)
    assert parse_duration(d["Service.WatchdogSec"][0]) > 0
    assert parse_duration(d["Service.TimeoutStopSec"][0]) > DaemonSettings().shutdown_grace_s


def test_the_service_runs_the_config_in_etc() -> None:
    """The single service reads /etc/rlcd/rlcd.toml and spills temp files to its cache dir."""
    d = directives(SERVICE)
    assert d["Service.ExecStart"] == ["/usr/bin/env rlcd run --config /etc/rlcd/rlcd.toml"]
    assert d["Service.CacheDirectory"] == ["rlcd"]
    assert d["Service.Environment"] == ["TMPDIR=%C/rlcd"]


def test_the_template_runs_one_shard_of_the_shared_config() -> None:
    """rlcd@N passes --instance N and reads the one shared file; each shard spills apart."""
    d = directives(TEMPLATE)
    assert d["Service.ExecStart"] == [
        "/usr/bin/env rlcd run --config /etc/rlcd/rlcd.toml --instance %i"
    ]
    assert d["Service.CacheDirectory"] == ["rlcd/%i"]
    assert d["Service.Environment"] == ["TMPDIR=%C/rlcd/%i"]
