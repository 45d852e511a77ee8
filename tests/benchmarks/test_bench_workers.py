"""The every-core benchmark's arithmetic and its Envoy's config, without servers."""

from __future__ import annotations

from benchmarks.service import envoy_front, workers
from benchmarks.service.load import Load
from benchmarks.service.workers import MANY, ONE, STREAMS, Measured, Result


def result(rate: float, server: tuple[float, ...], seconds: float = 2.0) -> Result:
    requests = int(rate * seconds)
    load = Load(requests, rate, 0.01, 0.02, 0)
    return Result(load, seconds, server, 0.2, 0.4, 0.1, requests * 2, 64)


def test_server_cpu_is_every_process_a_request_and_the_busiest_is_a_share() -> None:
    one = result(1_000.0, (0.0, 0.75, 0.25))  # the parent idle, two workers
    assert one.cpu == 1.0 / 2_000
    assert one.cores(sum(one.server)) == 0.5
    assert one.busiest == 0.75


def test_a_case_keeps_its_best_rate_and_its_least_cpu() -> None:
    measured = Measured([result(1_000.0, (1.0,)), result(1_200.0, (1.8,))])
    assert measured.best.load.rate == 1_200.0
    assert measured.cpu == 1.0 / 2_000


def test_the_ratios_are_two_workers_over_one() -> None:
    case = workers.CASES[0]
    measured = {case: {1: Measured([result(1_000.0, (1.0,))]),
                       2: Measured([result(1_500.0, (0.0, 1.0, 1.0))])}}  # fmt: skip
    (row,) = workers._ratios(measured)
    assert row[2] == "1.50x"  # requests/s
    assert row[4] == "0.75x"  # decisions/s per core: 1,000 → 750
    assert row[-1] == "50%"


def test_envoy_asks_each_server_on_one_connection_or_on_many() -> None:
    listeners = {}
    for name, pool in ((workers._name(2, ONE), ONE), (workers._name(2, MANY), MANY)):
        limiter = workers._filter(name)["typed_config"]
        assert limiter["failure_mode_deny"] is False
        assert limiter["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"] == (
            f"rls_{name}"
        )
        listeners[pool] = workers._limited(name)["route"]["rate_limits"]
    assert listeners[ONE] == listeners[MANY]
    keys = [limit["actions"][0]["request_headers"]["descriptor_key"] for limit in listeners[ONE]]
    assert keys == ["client", "hot"]


def test_a_cluster_of_many_connections_bounds_its_streams_on_each() -> None:
    def options(streams: int | None) -> dict[str, int]:
        found = envoy_front.cluster("rls", 8081, True, streams)["typed_extension_protocol_options"]
        protocol = found["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        http2: dict[str, int] = protocol["explicit_http_config"]["http2_protocol_options"]
        return http2

    assert options(None) == {}
    assert options(STREAMS) == {"max_concurrent_streams": STREAMS}
