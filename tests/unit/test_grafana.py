"""deploy/grafana/membus.json: an importable dashboard whose queries name only the metrics the
handlers export, with a data source on every panel and unique panel ids."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "membus.json"

COUNTERS = {
    "membus_requests_total",
    "membus_embedded_texts_total",
    "membus_redis_errors_total",
    "membus_durable_writes_total",
    "membus_unanswered_failures_total",
}
GAUGES = {"membus_inflight_requests", "membus_waiting_requests"}
HISTOGRAMS = {"membus_request_duration_seconds", "membus_embed_duration_seconds"}
METRICS = (
    COUNTERS
    | GAUGES
    | {f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
)
METRIC_NAME = re.compile(r"membus_[a-z_]+")


def load() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def exprs() -> list[str]:
    return [t["expr"] for p in panels(load()["panels"]) for t in p.get("targets", [])]


def test_dashboard_is_importable() -> None:
    dashboard = load()
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] and dashboard["title"]
    assert dashboard["id"] is None  # Grafana assigns one on import
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["instance"]["type"] == "query"
    assert "membus_" in variables["instance"]["query"]


def test_every_panel_has_a_datasource_and_a_unique_id() -> None:
    all_panels = list(panels(load()["panels"]))
    ids = [p["id"] for p in all_panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in all_panels:
        ds = panel.get("datasource")
        assert ds == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for t in panel.get("targets", []):
            assert t["datasource"] == ds, panel["title"]
            assert t["expr"].strip(), panel["title"]


def test_grid_positions_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for panel in panels(load()["panels"]):
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24
        own = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not own & cells, panel["title"]
        cells |= own


@pytest.mark.parametrize("expr", exprs())
def test_queries_name_only_exported_metrics(expr: str) -> None:
    names = set(METRIC_NAME.findall(expr))
    assert names, f"no membus metric in {expr}"
    assert names <= METRICS, f"unknown metrics {names - METRICS} in {expr}"
    assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}")
    if "histogram_quantile" in expr:
        assert names <= {f"{h}_bucket" for h in HISTOGRAMS}
        assert re.search(r"by \(le\b", expr), expr
    # Counters only through rate(); gauges as they are.
    for counter in COUNTERS & names:
        assert f"rate({counter}" in expr, expr
    assert 'instance=~"$instance"' in expr, "every query follows the instance variable"


def test_dashboard_covers_every_metric() -> None:
    used = {name for e in exprs() for name in METRIC_NAME.findall(e)}
    for metric in COUNTERS | GAUGES:
        assert metric in used, metric
    for histogram in HISTOGRAMS:
        assert f"{histogram}_bucket" in used, histogram
