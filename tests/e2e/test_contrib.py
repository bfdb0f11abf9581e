"""contrib/'s dashboard and alert rules against a live daemon: every metric they name is in its
``/metrics``, the rules have Prometheus's structure and the dashboard Grafana's fields."""

from __future__ import annotations

import json
import re
import signal
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import yaml

from rlcd.cli.daemon_demo import DaemonProcess
from tests.integration.tables import append, batch
from tests.markdown import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

DASHBOARD = ROOT / "contrib" / "grafana" / "rlcd-dashboard.json"
RULES = ROOT / "contrib" / "prometheus" / "rlcd-alerts.yml"
NAME = re.compile(r"\b(?:rlcd|process)_\w+")

CONFIG = """
[daemon]
poll_interval = "200ms"
[metrics]
listen = "127.0.0.1:0"
[[discover]]
prefix = "tables"
interval = "1s"
[discover.policy]
min_small_files = 2
min_interval = "0s"
min_file_age = "0s"
"""


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    variables = doc["templating"]["list"]
    return exprs + [v["query"]["query"] for v in variables if v["type"] == "query"]


def test_rules_have_prometheus_structure() -> None:
    """Groups of named rules, each an alert with an expression, a duration, a severity and a
    summary (promtool is not in the test environment)."""
    doc = yaml.safe_load(RULES.read_text())
    assert [set(g) for g in doc["groups"]] == [{"name", "rules"}] * len(doc["groups"])
    for rule in rules():
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"\d+[smh]", rule["for"]) and rule["expr"].strip()
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert {"summary", "description"} <= set(rule["annotations"])


def test_dashboard_has_the_fields_grafana_needs() -> None:
    """A title and uid, a schema version, the data source variable, and panels with unique
    ids, a position and Prometheus targets."""
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["uid"] and isinstance(doc["schemaVersion"], int)
    assert any(v["type"] == "datasource" for v in doc["templating"]["list"])
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        assert panel["type"] in {"stat", "timeseries"} and panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["targets"] and all(t["refId"] and t["expr"] for t in panel["targets"])


async def test_every_metric_contrib_names_is_served_by_a_live_daemon(tmp_path: Path) -> None:
    """A daemon compacting one table and failing on another serves every series the dashboard
    and the rules name."""
    for name in ("good", "broken"):
        for i in range(3):
            append(tmp_path / "tables" / name, batch(i * 10, 10))
    (tmp_path / "tables" / "broken" / "_delta_log" / f"{1:020d}.json").write_text("{no\n")
    (tmp_path / "rlcd.toml").write_text(CONFIG)
    daemon = DaemonProcess(tmp_path / "rlcd.toml", env={}, log=tmp_path / "daemon.log")
    try:
        served: set[str] = set()
        with anyio.move_on_after(60):
            while not {"rlcd_compaction_runs_total", "rlcd_table_errors_total"} <= served:
                await anyio.sleep(0.3)
                ports = [
                    e["port"] for e in daemon.events() if e.get("event") == "metrics_listening"
                ]
                if ports:
                    served = set(await anyio.to_thread.run_sync(_sample_names, int(ports[0])))
        daemon.signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(daemon.wait, 30.0) == 0
    finally:
        daemon.kill()
    named = {
        m for e in [*dashboard_exprs(), *(r["expr"] for r in rules())] for m in NAME.findall(e)
    }
    assert sorted(named - served) == []
    assert not [n for n in served if n.endswith("_created")]


def _sample_names(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text: str = answer.read().decode()
    return [line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1].isalpha()]
