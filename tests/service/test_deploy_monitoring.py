"""The monitoring files that ship in ``deploy/``: the Grafana dashboard
(``deploy/grafana/ratekeeper.json``) and the Prometheus alert rules
(``deploy/prometheus/alerts.yaml``, with their unit tests in ``alerts.test.yaml``).

The rules are checked and unit-tested by promtool, from Debian's ``prometheus`` package
(``scripts/test.sh`` installs it). Then a real Prometheus scrapes a real ``ratekeeper serve`` on
a real Redis, after allowed and refused checks, and loads the rules: every query of the
dashboard and every alert's expression is run through its HTTP API, and every metric they name
has a series there and is in the service's own ``/metrics``.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import RedisServer, ServerProcess, free_port, wait_for
from tests.service.served import Served

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "ratekeeper.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts.test.yaml"
DEPLOY_README = ROOT / "deploy" / "README.md"

SEVERITIES = {"critical", "warning", "info"}
#: What Grafana puts for the dashboard's variables: "All" for job and instance (their
#: ``allValue``, checked below), and the rate interval it computes for a 15 s scrape.
GRAFANA_VALUES = {"$job": ".+", "$instance": ".+", "$__rate_interval": "1m"}
#: Every metric selector of the dashboard starts with these matchers: its panels follow the
#: job and instance chosen.
SELECTED = '{job=~"$job", instance=~"$instance"'

RULES = """
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_user}
"""


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed; scripts/test.sh installs Debian's prometheus")
    return found


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def panels() -> list[dict[str, Any]]:
    """The dashboard's panels, rows left out."""
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def dashboard_queries() -> dict[str, str]:
    """Every query of the dashboard, by ``panel title/refId``."""
    return {
        f"{panel['title']}/{target['refId']}": target["expr"]
        for panel in panels()
        for target in panel["targets"]
    }


def variables() -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in dashboard()["templating"]["list"]}


def as_grafana_sends(expr: str) -> str:
    """``expr`` with the dashboard's variables replaced as Grafana does for "All"."""
    for name, value in GRAFANA_VALUES.items():
        expr = expr.replace(name, value)
    if "$" in expr:
        raise ValueError(f"a variable Grafana would not fill: {expr}")
    return expr


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:])[a-zA-Z_:][\w:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
_KEYWORDS |= {"group_left", "group_right", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: its identifiers that are not functions,
    aggregations, keywords, label names (in matchers and groupings) nor durations."""
    expr = _STRING.sub('""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges and subqueries
    expr = _GROUPING.sub(" ", expr)
    names = set()
    for found in _IDENTIFIER.finditer(expr):
        name = found.group()
        if expr[found.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def every_expression() -> dict[str, str]:
    """Every PromQL expression shipped, as Prometheus receives it, by where it comes from."""
    found = {
        f"dashboard: {where}": as_grafana_sends(expr) for where, expr in dashboard_queries().items()
    }
    for rule in alert_rules():
        found[f"alert: {rule['alert']}"] = rule["expr"]
    return found


# -- how the names are found --------------------------------------------------------------------


def test_metric_names_are_the_selected_metrics_only() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (surface, le) (rate(a_bucket{job=~"x", le="0.1"}[5m])))'
        " / on (job) group_left sum without (instance) (b_total offset 5m) > bool 1e3"
        " or vector(0) unless c:recorded unless max_over_time(d[1h:1m]) and Inf"
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "c:recorded", "d"}
    assert metric_names('count({__name__="x"})') == set()


# -- the alert rules, by promtool ---------------------------------------------------------------


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary("promtool"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_promtool_checks_the_alert_rules() -> None:
    checked = promtool("check", "rules", str(ALERTS), cwd=ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def test_promtool_runs_the_alert_unit_tests() -> None:
    tested = promtool("test", "rules", str(ALERTS_TEST), cwd=ROOT)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_is_tested_firing_and_quiet() -> None:
    """The unit tests have, for every alert, a time where it fires and one where it does not."""
    suite = yaml.safe_load(ALERTS_TEST.read_text(encoding="utf-8"))
    assert suite["rule_files"] == [ALERTS.name]
    cases = [case for test in suite["tests"] for case in test["alert_rule_test"]]
    for rule in alert_rules():
        own = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in own), f"{rule['alert']} never fires"
        assert any(not case["exp_alerts"] for case in own), f"{rule['alert']} is never quiet"


@pytest.mark.parametrize("name", [rule["alert"] for rule in alert_rules()])
def test_an_alert_that_cannot_fire_fails_the_unit_tests(tmp_path: Path, name: str) -> None:
    """The unit tests see each alert fire: with its expression made one that never holds,
    promtool fails on that alert."""
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    broken = copy.deepcopy(groups)
    for group in broken["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == name:
                rule["expr"] = "vector(0) > 1"
    (tmp_path / ALERTS.name).write_text(yaml.safe_dump(broken), encoding="utf-8")
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    tested = promtool("test", "rules", ALERTS_TEST.name, cwd=tmp_path)
    assert tested.returncode != 0
    assert f"alertname: {name}," in tested.stdout + tested.stderr


def readme_anchors() -> set[str]:
    """The anchors of deploy/README.md's headings, as GitHub makes them."""
    anchors = set()
    for line in DEPLOY_README.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_every_alert_has_a_severity_and_says_what_to_do() -> None:
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names))
    anchors = readme_anchors()
    for rule in alert_rules():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook"}, rule["alert"]
        page, _, anchor = annotations["runbook"].partition("#")
        assert page == "deploy/README.md"
        assert anchor == rule["alert"].lower() and anchor in anchors, rule["alert"]


# -- the dashboard ------------------------------------------------------------------------------


def test_the_dashboard_has_a_data_source_and_job_and_instance_variables() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 39
    assert board["uid"] == "ratekeeper" and board["id"] is None
    found = variables()
    assert (found["datasource"]["type"], found["datasource"]["query"]) == (
        "datasource",
        "prometheus",
    )
    for name in ("job", "instance"):
        variable = found[name]
        assert variable["type"] == "query" and variable["datasource"]["uid"] == "${datasource}"
        assert variable["includeAll"] and variable["multi"]
        assert variable["allValue"] == GRAFANA_VALUES[f"${name}"]


def test_every_panel_queries_the_chosen_data_source_job_and_instance() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            for found in re.finditer(r"ratekeeper_\w+", target["expr"]):
                assert target["expr"][found.end() :].startswith(SELECTED), target["expr"]


def test_the_panels_fit_the_grid_without_overlapping() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_every_expression_names_only_ratekeepers_metrics() -> None:
    for where, expr in every_expression().items():
        names = metric_names(expr)
        assert names, where
        assert all(name.startswith("ratekeeper_") for name in names), (where, names)


# -- on a running service -----------------------------------------------------------------------


class PrometheusServer(ServerProcess):
    """One ``prometheus`` on 127.0.0.1 with its data in ``directory``, scraping ``target``
    (host:port) every second as job ``ratekeeper`` and evaluating ``rules`` every second."""

    name = "prometheus"
    ready_timeout = 30.0

    def __init__(self, directory: Path, target: str, rules: Path) -> None:
        self.binary = binary("prometheus")
        self.directory = directory
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(rules)],
            "scrape_configs": [
                {"job_name": "ratekeeper", "static_configs": [{"targets": [target]}]}
            ],
        }
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.start_on_free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _launch(self) -> subprocess.Popen[bytes]:
        args = [
            self.binary,
            f"--config.file={self.directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with self._log().open("ab") as log:
            return subprocess.Popen(args, stdout=log, stderr=log, cwd=self.directory)

    def _answers(self, pid: int) -> bool:
        try:
            flags = httpx.get(f"{self.url}/api/v1/status/flags", timeout=1).json()["data"]
            ready = httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        except (httpx.HTTPError, ValueError, KeyError):
            return False
        return ready and flags["storage.tsdb.path"] == str(self.directory / "data")

    def _log(self) -> Path:
        return self.directory / "prometheus.log"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar) ``expr`` evaluates to now; raises on an error."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = answer.json()
        if body["status"] != "success":
            raise AssertionError(f"{expr}: {body['errorType']}: {body['error']}")
        data = body["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def rules(self) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/rules", timeout=10).json()
        return [rule for group in answer["data"]["groups"] for rule in group["rules"]]


class Monitored:
    """A running service as Prometheus sees it, and its own exposition."""

    def __init__(self, prometheus: PrometheusServer, target: str, exposed: set[str]) -> None:
        self.prometheus = prometheus
        self.target = target  # the service's host:port, its instance label
        self.exposed = exposed  # the sample names of its /metrics


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitored]:
    """``ratekeeper serve`` on a real Redis, after 4 allowed and 2 refused checks, scraped by
    a real Prometheus that loads the alert rules; ready once it has scraped the decisions
    three times."""
    home = tmp_path_factory.mktemp("monitored")
    rules = home / "edge.yaml"
    rules.write_text(RULES, encoding="utf-8")
    redis = RedisServer(home / "redis")
    try:
        served = Served(home, "--store", redis.url, "--rules", str(rules))
        try:
            codes = [check(served, user) for user in ["alice"] * 5 + ["bob"]]
            assert codes == [200, 200, 200, 429, 429, 200]
            exposition = httpx.get(f"{served.url}/metrics", timeout=10).text
            exposed = {
                sample.name
                for family in text_string_to_metric_families(exposition)
                for sample in family.samples
            }
            target = f"127.0.0.1:{served.http}"
            prometheus = PrometheusServer(home / "prometheus", target, ALERTS)
            try:
                scraped = 'count_over_time(ratekeeper_decisions_total{result="limited"}[1m])'
                wait_for(
                    lambda: [] if _at_least(prometheus.query(scraped), 3) else ["scrapes"],
                    30,
                    "three scrapes of the decisions",
                )
                yield Monitored(prometheus, target, exposed)
            finally:
                prometheus.stop()
        finally:
            served.stop()
    finally:
        redis.stop()


def check(served: Served, user: str) -> int:
    body = {"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": user}]}]}
    return httpx.post(f"{served.url}/v1/check", json=body, timeout=10).status_code


def _at_least(result: list[dict[str, Any]], count: int) -> bool:
    return bool(result) and all(float(series["value"][1]) >= count for series in result)


@pytest.mark.parametrize("where", sorted(every_expression()))
def test_every_expression_runs_and_every_metric_it_names_has_series(
    monitored: Monitored, where: str
) -> None:
    expr = every_expression()[where]
    answer = monitored.prometheus.query(expr)  # raises if Prometheus refuses it
    if where.startswith("dashboard: "):
        assert answer, f"the panel query shows nothing: {expr}"
    for name in metric_names(expr):
        assert name in monitored.exposed, f"{name} is not in the service's /metrics"
        series = monitored.prometheus.query(f'count({name}{{job="ratekeeper"}})')
        assert series and float(series[0]["value"][1]) >= 1, f"{name} has no series"


def test_the_dashboard_shows_every_metric_the_service_exposes(monitored: Monitored) -> None:
    """Every family of the service's /metrics has a panel (a histogram through any of its
    series); only the ``_created`` timestamps prometheus_client adds are left out."""
    shown = set().union(*(metric_names(as_grafana_sends(e)) for e in dashboard_queries().values()))
    families = {re.sub(r"_(bucket|count|sum|created)$", "", name) for name in monitored.exposed}
    missing = {
        family
        for family in families
        if not any(name == family or name.startswith(f"{family}_") for name in shown)
    }
    assert not missing


def test_the_variables_list_the_scraped_service(monitored: Monitored) -> None:
    """Each variable's ``label_values(selector, label)`` finds the service's job and
    instance in Prometheus."""
    found = variables()
    for name, expected in (("job", "ratekeeper"), ("instance", monitored.target)):
        definition = as_grafana_sends(found[name]["query"]["query"])
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", definition)
        assert match is not None, definition
        selector, label = match.groups()
        assert label == name
        answer = monitored.prometheus.query(f"count by ({label}) ({selector})")
        assert [series["metric"][label] for series in answer] == [expected]


def test_prometheus_loads_the_rules_and_none_fires_on_a_healthy_service(
    monitored: Monitored,
) -> None:
    """Prometheus evaluates every alert rule without an error, and a service whose store
    answers and whose refusals are a third of its decisions raises no alert."""
    evaluated = {rule["name"]: rule["lastEvaluation"] for rule in monitored.prometheus.rules()}
    assert set(evaluated) == {rule["alert"] for rule in alert_rules()}

    def fresh() -> list[str]:  # evaluated again since the decisions were scraped
        return [
            rule["name"]
            for rule in monitored.prometheus.rules()
            if rule["lastEvaluation"] == evaluated[rule["name"]]
        ]

    wait_for(fresh, 10, "a fresh evaluation of the rules")
    for rule in monitored.prometheus.rules():
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
        assert rule["state"] == "inactive", rule["name"]
