"""The combination matrix: every feature run with the others, on real servers.

The factors (``combinations``): the surface (HTTP, gRPC, nginx in front of the service, the
library), 1 or 2 workers, the request store (memory, Redis, Redis Cluster), and each feature
on or off: the dashboard, metrics, leased limits, debt, limits charged by outcome, address
blocks, shadow mode and overrides. The cases are generated to cover every pair of levels
that can meet (``test_the_cases_cover_every_allowed_pair``); each sends the same 49 requests
one after the other (``combined_traffic``) and holds every answer, and every figure the
service reports, to the exact counts the model gives: the clients' admitted and refused, the
rate-limit headers, ``/metrics`` summed over the workers, ``/v1/stats`` and ``/v1/top``, and
each key's remaining as ``/v1/peek`` says it. A leased key spread over two workers is held to
the leases' bound instead (docs/leases.md), and to exactly what it admitted once its slices
have ended.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratekeeper.service.inflight import DEFAULT_MAX_IN_FLIGHT
from tests.gateways import NginxServer, UpstreamServer
from tests.servers import wait_until
from tests.service import combined_surfaces as surfaces
from tests.service.combinations import (
    FACTORS,
    Case,
    allowed_pairs,
    cases,
    impossible,
    levels_of,
    pairs_of,
)
from tests.service.combined_surfaces import BEARER, Seen
from tests.service.combined_traffic import (
    DAY,
    DOMAIN,
    USER,
    Answer,
    Expected,
    closest,
    expect,
    idle_bound,
    leasing,
    rules,
    traffic,
)
from tests.service.served import Served
from tests.service.workers import (
    decisions_by_worker,
    metrics_directory,
    parse,
    worker_pids,
)

CASES = cases()
IN_FLIGHT_MAX = ("ratekeeper_decisions_in_flight_max", ())
#: Seconds a slice lives in the cases' stores (``lease_ttl``): slices end soon after the
#: traffic, and the store's count is then exact.
LEASE_TTL = 0.5


def test_the_cases_cover_every_allowed_pair() -> None:
    allowed = allowed_pairs()
    covered: set[Any] = set()
    for case in CASES:
        levels = levels_of(case)
        assert impossible(levels) is None, case
        covered |= pairs_of(levels)
    assert covered == allowed
    print(f"{len(CASES)} cases cover all {len(allowed)} allowed pairs of {len(FACTORS)} factors")


def test_the_constraints_say_why() -> None:
    assert impossible({"workers": 2, "store": "memory"}) == "two workers need a shared store"
    assert impossible({"surface": "grpc", "outcome": True}) is not None
    assert impossible({"surface": "library", "dashboard": True}) is not None
    assert impossible({"surface": "library", "metrics": True}) is not None
    assert impossible({"outcome": True, "shadow": True}) is not None
    assert impossible({"outcome": True, "overrides": True}) is not None
    assert impossible({"surface": "library", "workers": 2, "store": "cluster"}) is None


def test_the_memory_store_with_two_workers_is_refused(tmp_path: Path) -> None:
    """The one combination that is refused rather than run: ``serve --workers 2`` over the
    memory store, which counts per process."""
    with pytest.raises(RuntimeError, match="exited with"):
        Served(tmp_path, "--workers", "2", "--store", "memory://")


# -- servers shared by the cases ------------------------------------------------------------


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxServer]:
    """One nginx for the module, in front of one application, asking whichever service each
    request names."""
    app = UpstreamServer(tmp_path_factory.mktemp("application"))
    try:
        server = NginxServer(tmp_path_factory.mktemp("nginx"), surfaces.nginx_site(app.port))
        yield server
        server.stop()
    finally:
        app.stop()


def store_url(case: Case, request: pytest.FixtureRequest) -> str:
    if case.store == "memory":
        return "memory://"
    server = request.getfixturevalue("redis_server" if case.store == "redis" else "redis_cluster")
    prefix = f"combo-{uuid.uuid4().hex[:10]}"  # the case's own counters
    return f"{server.url}?prefix={prefix}&lease_ttl={LEASE_TTL}"


def clear_of_the_day_edge() -> None:
    """Wait past midnight UTC if it comes within a minute: the user limit's window is a day."""
    left = DAY - time.time() % DAY
    if left < 60:
        time.sleep(left + 1)


# -- the cases ---------------------------------------------------------------------------------


def _param(case: Case) -> Any:
    """A case; those of 2 workers or the cluster are slow (``-m "not slow"`` runs the rest)."""
    slow = case.workers > 1 or case.store == "cluster"
    return pytest.param(case, id=case.id, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_combination(case: Case, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    store = store_url(case, request)
    (tmp_path / "rules.yaml").write_text(rules(case))
    config = surfaces.seed_overrides(case, tmp_path)
    clear_of_the_day_edge()
    expected = expect(case)
    started = time.time()
    if case.service:
        run = run_service(case, request, tmp_path, store)
    else:
        run = run_library(case, store, config, str(tmp_path / "rules.yaml"))
    run.elapsed = time.time() - started
    problems = Checker(case, expected, run).problems()
    assert not problems, f"{case.id}:\n  " + "\n  ".join(problems)


class Run:
    """What one case saw: every answer, each key's remaining as the store says it once done,
    and (from the service) its figures."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.peeks: dict[str, int] = {}
        self.samples: list[dict[Any, float]] = []
        self.top: dict[str, Any] | None = None
        self.stats: dict[str, Any] | None = None
        self.by_worker: dict[int, float] = {}
        self.probes = 0  # requests that found which worker a connection reached
        self.elapsed = 0.0


def model_keys(case: Case) -> list[str]:
    return sorted({status.key for answer in expect(case).answers for status in answer.statuses})


def run_library(case: Case, store: str, config: str, rules_path: str) -> Run:
    """The traffic through the library; then each key's remaining, as a decider that holds
    no slice sees it: the one that decided (what it holds in memory is all there is), or,
    where it leased, a new one once the deciders have closed and given their slices back."""
    run = Run()

    def peeks(decider: Any) -> dict[str, int]:
        return {key: surfaces.library_peek(case, decider, key) for key in model_keys(case)}

    if case.workers == 1:
        app, decider = surfaces.library(case, store, config, rules_path)
        client = surfaces.Client(app)
        try:
            run.seen = [surfaces.through_library(client, one) for one in traffic()]
            if not case.leases:
                run.peeks = peeks(decider)
                return run
        finally:
            decider.close()  # gives back what its slices hold
    else:
        with surfaces.library_processes(case, store, config, rules_path) as send:
            run.seen = [send(n, one) for n, one in enumerate(traffic())]
    _, decider = surfaces.library(case, store, config, rules_path)  # the others have closed
    try:
        run.peeks = peeks(decider)
    finally:
        decider.close()
    return run


def run_service(case: Case, request: pytest.FixtureRequest, directory: Path, store: str) -> Run:
    run = Run()
    nginx = request.getfixturevalue("nginx") if case.surface == "nginx" else None
    served = surfaces.serve(case, directory, store)
    try:
        pids = worker_pids(served) if case.workers > 1 else []
        if pids:  # every worker has started (its HTTP and gRPC servers): its gauges are in
            bound = len(pids) * DEFAULT_MAX_IN_FLIGHT
            with surfaces.fresh(served.url) as http:
                wait_until(
                    lambda: parse(http.get("/metrics").text)[0].get(IN_FLIGHT_MAX) == bound,
                    30,
                    "every worker started",
                )
        grpc_client = surfaces.GrpcClient(served.grpc, fresh=case.workers > 1)
        pinned = None
        if pids and case.surface == "http":
            pinned = surfaces.Pinned(served.http, metrics_directory(pids[0]), pids)
        try:
            for n, one in enumerate(traffic()):
                if case.surface == "http":
                    run.seen.append(surfaces.through_http(served, one, pinned, n))
                elif case.surface == "grpc":
                    run.seen.append(grpc_client.call(one))
                else:
                    assert nginx is not None
                    run.seen.append(surfaces.through_nginx(nginx.port, served, one))
        finally:
            grpc_client.close()
            if pinned is not None:
                pinned.close()
                run.probes = pinned.probes
        if pids:  # a worker that decided nothing has no file of counts
            directory = metrics_directory(pids[0])
            counting = [pid for pid in pids if (directory / f"counter_{pid}.db").exists()]
            run.by_worker = dict.fromkeys(pids, 0.0)
            run.by_worker.update(decisions_by_worker(directory, counting))
        if case.leases:
            time.sleep(3 * LEASE_TTL)  # every slice has ended: the store's counts are exact
        with surfaces.fresh(served.url) as http:  # a peek is a decision too: read them last
            if case.metrics:
                run.samples = [parse(http.get("/metrics").text)[0] for _ in range(2)]
            if case.dashboard:
                run.top, run.stats = dashboard(http, case)
            run.peeks = {key: surfaces.peek(http, key) for key in model_keys(case)}
    finally:
        assert served.stop() == 0
    return run


def dashboard(http: Any, case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
    """``/v1/top`` and ``/v1/stats`` once every decision is in them (each worker records its
    own every second, and a second is in the series once it has ended), each read twice, so
    that with 2 workers both may answer."""
    expected = expect(case)
    keyed = sum(expected.per_key()[0].values())
    decided = sum(expected.results().values())

    def get(route: str, **params: Any) -> dict[str, Any]:
        answer = http.get(route, params=params, headers=BEARER)
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    def complete() -> bool:
        rows = [row for row in get("/v1/stats")["rules"] if row["domain"] == DOMAIN]
        results = ("allowed", "limited", "shadowed")
        counted = sum(sum(row[result]) for row in rows for result in results)
        return get("/v1/top", window=60, n=100)["requests"]["total"] >= keyed and (
            counted >= decided
        )

    wait_until(complete, 15, "every decision in /v1/top and /v1/stats")
    tops = [get("/v1/top", window=60, n=100) for _ in range(2)]
    stats = [get("/v1/stats") for _ in range(2)]
    return tops[-1], stats[-1]


# -- what must hold ----------------------------------------------------------------------------


class Checker:
    """Holds one case's run to the model; ``problems()`` lists every difference."""

    def __init__(self, case: Case, expected: Expected, run: Run) -> None:
        self.case = case
        self.expected = expected
        self.run = run
        self.found: list[str] = []
        #: Keys whose answers are the leases' to choose (a leased key over 2 workers).
        self.loose = {
            key
            for key, limit in expected.limits.items()
            if leasing(key, case) and case.workers > 1 and idle_bound(limit, case) > 0
        }

    def problems(self) -> list[str]:
        self.leases()
        self.answers()
        self.peeks()
        if self.case.metrics:
            self.metrics()
        if self.case.dashboard:
            self.dashboards()
        if self.run.by_worker and self.case.surface != "nginx":
            # nginx opens a connection per subrequest, and which worker accepts each is the
            # kernel's choice; HTTP and gRPC connections are spread on purpose.
            spread = sum(1 for n in self.run.by_worker.values() if n > 0)
            self.expect(spread == 2, f"the decisions did not spread: {self.run.by_worker}")
        return self.found

    def expect(self, condition: bool, problem: str) -> None:
        if not condition:
            self.found.append(problem)

    def leases(self) -> None:
        """A loose key admits at most its limit and at least its limit less what the slices
        may hold idle; once the slices have ended the store counts exactly what was admitted.
        The model then takes the admitted count, the first hits admitted, for the totals."""
        for key in sorted(self.loose):
            limit = self.expected.limits[key]
            counted = limit.amount - self.run.peeks[key]
            numbers = [
                n
                for n, answer in enumerate(self.expected.answers)
                if any(status.key == key for status in answer.statuses)
            ]
            high = min(limit.amount, len(numbers))
            low = min(limit.amount - idle_bound(limit, self.case), len(numbers))
            self.expect(
                low <= counted <= high, f"{key}: {counted} admitted, not within [{low}, {high}]"
            )
            mine = [self.expected.answers[n] for n in numbers]
            seen = [self.run.seen[n] for n in numbers]
            if not self.case.shadow:
                admitted = sum(one.status != 429 for one in seen)
                self.expect(admitted == counted, f"{key}: clients saw {admitted}, store {counted}")
            left = counted
            for answer in mine:
                for status in answer.statuses:
                    if status.key == key:
                        status.granted = left > 0
                        status.shadowed = self.case.shadow and not status.granted
                        left -= status.granted
                answer.allowed = all(s.allowed for s in answer.statuses)
            self.expected.counts[key] = counted

    def answers(self) -> None:
        for number, (answer, seen) in enumerate(
            zip(self.expected.answers, self.run.seen, strict=True)
        ):
            what = f"request {number} ({answer.request})"
            if any(status.key in self.loose for status in answer.statuses):
                continue  # the leases' to choose: held to their bound above
            want = self.status_code(answer)
            if seen.status != want:
                self.found.append(f"{what}: status {seen.status}, not {want}")
                continue
            if seen.statuses is not None:
                got = list(seen.statuses)
                model = [(s.limit.amount, s.remaining, s.allowed) for s in answer.statuses]
                if not self.case.leases:
                    self.expect(got == model, f"{what}: statuses {got}, not {model}")
                else:  # remaining under a lease is an estimate: the limits and codes
                    got = [(one[0], one[2]) for one in seen.statuses]
                    model = [(s.limit.amount, s.allowed) for s in answer.statuses]
                    self.expect(got == model, f"{what}: statuses {got}, not {model}")
            if self.case.surface != "grpc":
                self.headers(what, answer, seen)

    def status_code(self, answer: Answer) -> int:
        if not answer.allowed:
            return 429
        if self.case.surface == "library" and answer.request.fails:
            return 401  # the application's own answer
        return 200

    def headers(self, what: str, answer: Answer, seen: Seen) -> None:
        """``X-RateLimit-*`` of the status closest to its limit; ``Retry-After`` on refusal.
        The library's middleware leaves shadowed statuses out of its headers (the service
        reports them, remaining 0)."""
        statuses = answer.statuses
        if self.case.surface == "library":
            statuses = [s for s in statuses if not s.shadowed]
        status = closest(statuses)
        headers = seen.headers
        if status is None:
            self.expect("x-ratelimit-limit" not in headers, f"{what}: headers {headers}")
            return
        got = (headers.get("x-ratelimit-limit"), headers.get("x-ratelimit-remaining"))
        want = (str(status.limit.amount), str(status.remaining))
        if not leasing(status.key, self.case):
            self.expect(got == want, f"{what}: limit, remaining {got}, not {want}")
        else:
            self.expect(got[0] == want[0], f"{what}: limit {got[0]}, not {want[0]}")
        slack = math.ceil(self.run.elapsed) + 1
        reset = status.reset
        timed = not leasing(status.key, self.case)
        if "x-ratelimit-reset" not in headers:
            self.found.append(f"{what}: no X-RateLimit-Reset in {headers}")
        elif timed:
            value = int(headers["x-ratelimit-reset"])
            self.expect(
                reset - slack <= value <= math.ceil(reset),
                f"{what}: X-RateLimit-Reset {value}, not about {reset:.0f}",
            )
        retry = headers.get("retry-after")
        if answer.allowed:
            self.expect(retry is None, f"{what}: Retry-After {retry} on an admitted request")
            return
        refusing = [s for s in answer.statuses if not s.allowed]
        if retry is None:
            self.found.append(f"{what}: no Retry-After on a refusal: {headers}")
        elif all(not leasing(s.key, self.case) for s in refusing):
            wait = max(s.retry for s in refusing)
            self.expect(
                min(wait, DAY) - slack <= int(retry) <= min(math.ceil(wait), DAY),
                f"{what}: Retry-After {retry}, not about {wait:.0f}",
            )

    def peeks(self) -> None:
        for key, left in sorted(self.run.peeks.items()):
            limit = self.expected.limits[key]
            want = max(limit.amount - self.expected.counts.get(key, 0), 0)
            self.expect(left == want, f"/v1/peek {key}: {left} left, not {want}")

    def metrics(self) -> None:
        want = self.expected.results()
        for samples in self.run.samples:
            counted: Counter[tuple[str, str]] = Counter()
            for (name, labels), value in samples.items():
                if name == "ratekeeper_decisions_total" and dict(labels)["domain"] == DOMAIN:
                    counted[dict(labels)["rule"], dict(labels)["result"]] += int(value)
            self.expect(counted == want, f"/metrics decisions {dict(counted)}, not {dict(want)}")
            timed = samples.get(
                ("ratekeeper_decision_seconds_count", (("surface", self.case.surface),))
            )
            requests = len(self.expected.answers) + self.run.probes
            self.expect(
                timed == requests, f"/metrics decision_seconds_count {timed}, not {requests}"
            )

    def dashboards(self) -> None:
        top, stats = self.run.top, self.run.stats
        assert top is not None and stats is not None
        decided, refused, latest = self.expected.per_key()
        rows = {row["key"]: row for row in top["requests"]["keys"] if row["domain"] == DOMAIN}
        self.expect(
            {key: row["count"] for key, row in rows.items()} == dict(decided),
            f"/v1/top requests {[(k, r['count']) for k, r in rows.items()]}, not {dict(decided)}",
        )
        refusals = {row["key"]: row["count"] for row in top["refused"]["keys"]}
        self.expect(
            refusals == {k: n for k, n in refused.items() if n},
            f"/v1/top refused {refusals}, not {dict(refused)}",
        )
        self.expect(top["requests"]["total"] == sum(decided.values()), "/v1/top total")
        for key, status in sorted(latest.items()):
            row = rows.get(key)
            if row is None:
                continue
            if key in self.loose or leasing(key, self.case):
                continue  # the latest remaining under a lease is that worker's estimate
            shown = (row["remaining"], row["allowed"])
            want = (status.remaining, status.allowed)
            self.expect(shown == want, f"/v1/top {key}: (remaining, allowed) {shown}, not {want}")
            self.expect(
                row["remaining"] == self.run.peeks.get(key),
                f"/v1/top {key}: remaining {row['remaining']}, /v1/peek {self.run.peeks.get(key)}",
            )
        shown: Counter[tuple[str, str]] = Counter()
        for row in stats["rules"]:
            if row["domain"] == DOMAIN:
                for result in ("allowed", "limited", "shadowed"):
                    if sum(row[result]):
                        shown[row["rule"], result] += sum(row[result])
        want = self.expected.results()
        self.expect(shown == want, f"/v1/stats by rule {dict(shown)}, not {dict(want)}")


def test_the_traffic_is_what_the_model_counts() -> None:
    """The model's own arithmetic on the plainest case: 20 of alice's 24, 12 of the block's
    12 (each address apart), 6 of the single address's 8, 5 of vip's 5."""
    expected = expect(Case("http", 1, "memory"))
    admitted = Counter(
        (a.request.user or a.request.address.rsplit(".", 1)[0]) for a in expected.answers
        if a.allowed
    )  # fmt: skip
    assert admitted == {"alice": 20, "127.0.20": 12, "127.0.40": 6, "vip": 5}
    assert USER.amount == 20
