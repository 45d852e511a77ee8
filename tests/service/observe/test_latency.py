"""``Latency`` observes in bulk what a histogram observed one value at a time shows: the same
buckets and count, and the same sum but for its last bits, whenever it is read."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from ratekeeper.service.observe.latency import PENDING, Latency
from ratekeeper.service.observe.metrics import LATENCY_BUCKETS, Metrics

SECONDS = [0.0, 0.000_05, 0.000_07, 0.001, 0.002_5, 0.3, 5.0, 1e9, -1.0, math.inf, math.nan]


def histogram(registry: CollectorRegistry | None) -> Histogram:
    return Histogram("t_seconds", "t", ["surface"], buckets=LATENCY_BUCKETS, registry=registry)


def samples(collected: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in collected  # type: ignore[attr-defined]
        for sample in metric.samples
        if not sample.name.endswith("_created")
    }


def same(found: dict[object, float], expected: dict[object, float]) -> None:
    assert found.keys() == expected.keys()
    for name, value in expected.items():
        assert found[name] == pytest.approx(value, nan_ok=True), name


@pytest.mark.parametrize("bulk", [True, False])
def test_a_read_sees_every_value_observed_before_it(bulk: bool) -> None:
    one_by_one = histogram(None)
    for surface in ("http", "grpc"):  # every surface shown from the start, as Latency does
        one_by_one.labels(surface)
    latency = Latency(histogram(None), ["http", "grpc"], bulk=bulk)
    observe = {surface: latency.observer(surface) for surface in ("http", "grpc")}
    for index, seconds in enumerate(SECONDS * 3):
        surface = "http" if index % 3 else "grpc"
        one_by_one.labels(surface).observe(seconds)
        observe[surface](seconds)
        if index % 7 == 0:
            same(samples(latency.collect()), samples(one_by_one.collect()))
    same(samples(latency.collect()), samples(one_by_one.collect()))


def test_values_are_added_once_pending_are_many() -> None:
    latency = Latency(histogram(None), ["http"], bulk=True)
    observe = latency.observer("http")
    for _ in range(PENDING):
        observe(0.001)
    counted = samples(latency.histogram.collect())  # read without adding what is pending
    assert counted[("t_seconds_count", (("surface", "http"),))] == PENDING


def test_a_scrape_shows_every_latency_observed() -> None:
    metrics = Metrics()
    for _ in range(5):
        metrics.observe_latency("http", 0.000_2)
    metrics.latency_observer("grpc")(0.02)
    text = metrics.text().decode()
    assert 'ratekeeper_decision_seconds_count{surface="http"} 5.0' in text
    assert 'ratekeeper_decision_seconds_bucket{le="0.00025",surface="http"} 5.0' in text
    assert 'ratekeeper_decision_seconds_count{surface="grpc"} 1.0' in text
    assert metrics.latency_counts()["http"][2] == 5
    with pytest.raises(ValueError, match="surface must be one of"):
        metrics.latency_observer("smtp")


def test_the_histogram_keeps_its_place_among_the_metrics() -> None:
    registry = CollectorRegistry()
    histogram(registry).labels("http").observe(0.1)
    direct = generate_latest(registry).decode().splitlines()
    registry = CollectorRegistry()
    latency = Latency(histogram(None), ["http"], bulk=True)
    registry.register(latency)
    latency.observer("http")(0.1)
    through = generate_latest(registry).decode().splitlines()
    strip = [line for line in direct if "_created" not in line]
    assert [line for line in through if "_created" not in line] == strip
