"""The every-core benchmark's arithmetic, its cases and its Envoy's config, without servers."""

from __future__ import annotations

from benchmarks.service import envoy_front, workers, workers_envoy, workers_report
from benchmarks.service.load import Load
from benchmarks.service.workers_envoy import MANY, ONE, STREAMS
from benchmarks.service.workers_report import AIO, PYVOY, Measured, Rated, Result


def result(rate: float, server: tuple[float, ...], seconds: float = 2.0) -> Result:
    requests = int(rate * seconds)
    load = Load(requests, rate, 0.01, 0.02, 0)
    return Result(load, seconds, server, 0.2, 0.4, 0.1, requests * 2, 64)


def test_server_cpu_is_every_process_a_request_and_the_busiest_is_a_share() -> None:
    one = result(1_000.0, (0.0, 0.75, 0.25))  # the parent idle, two workers
    assert one.cpu == 1.0 / 2_000
    assert one.cores(sum(one.server)) == 0.5
    assert one.busiest == 0.75
    assert one.commands_each == 2.0


def test_a_case_keeps_its_best_rate_and_its_least_cpu() -> None:
    measured = Measured([result(1_000.0, (1.0,)), result(1_200.0, (1.8,))])
    assert measured.best.load.rate == 1_200.0
    assert measured.cpu == 1.0 / 2_000
    assert measured.per_core == 2_000


def test_the_ratios_are_two_workers_over_one_stack_by_stack() -> None:
    measured = {"HTTP key": {(AIO, 1): Measured([result(1_000.0, (1.0,))]),
                             (AIO, 2): Measured([result(1_500.0, (0.0, 1.0, 1.0))]),
                             (PYVOY, 1): Measured([result(900.0, (1.0,))])}}  # fmt: skip
    (row,) = workers_report.ratios(measured)  # pyvoy has no second instance here: no row
    assert row[1] == "uvicorn + grpc.aio"
    assert row[3] == "1.50x"  # requests/s
    assert row[5] == "0.75x"  # decisions/s per core: 1,000 → 750
    assert row[-1] == "50%"


def test_the_summary_sets_envoys_door_against_uvicorns_http_door_per_core() -> None:
    http, one, many = "HTTP descriptor", "Envoy, one", "Envoy, many"
    measured = {
        http: {(AIO, 1): Measured([result(1_000.0, (0.2,))])},  # 10,000 a core
        one: {
            (AIO, 1): Measured([result(1_000.0, (0.8,))]),  # 2,500 a core
            (PYVOY, 1): Measured([result(1_000.0, (0.4,))]),  # 5,000 a core
        },
        many: {(PYVOY, 1): Measured([result(1_000.0, (0.25,))])},  # 8,000 a core
    }
    rated = {(PYVOY, 1): Rated(2_000.0, 1_600.0, result(1_590.0, (0.2,)))}
    aio, pyvoy = workers_report.summary(measured, http, (one, many), rated)
    assert aio[:6] == ["uvicorn + grpc.aio, --workers 1", "10,000", "2,500", "0.25x ✗",
                       "1,375 ✗", "—"]  # fmt: skip
    assert aio[-4:] == ["—"] * 4
    assert pyvoy[:5] == ["pyvoy, 1 instance", "10,000", "5,000", "0.50x ✗", "2,750 ✗"]
    assert pyvoy[5:9] == ["—"] * 4  # no sweep was given
    assert pyvoy[9] == "0.80x ✓"
    assert pyvoy[10:12] == ["2.00", "2.00"]  # Redis commands a decision: Envoy's, HTTP's
    assert pyvoy[-4:] == ["2,000", "1,590 (80%)", "10.00", "20.00"]
    assert len(pyvoy) == len(workers_report.SUMMARY_HEADERS)


def test_the_summary_sets_each_door_at_its_best_against_the_other() -> None:
    http, http_more, one, one_more, many = "HTTP", "HTTP, 128", "Envoy", "Envoy, 128", "many"
    measured = {
        http: {(AIO, 1): Measured([result(1_000.0, (0.1,))]),  # 20,000 a core
               (AIO, 2): Measured([result(1_000.0, (0.1,))])},
        http_more: {(AIO, 1): Measured([result(1_000.0, (0.125,))])},  # 16,000: 64 is best
        one: {(PYVOY, 1): Measured([result(1_000.0, (0.2,))]),  # 10,000 a core
              (PYVOY, 2): Measured([result(1_000.0, (0.2,))])},
        one_more: {(PYVOY, 1): Measured([result(1_000.0, (0.125,))])},  # 16,000: 128 is best
        many: {},
    }  # fmt: skip
    swept = ((http, http_more), (one, one_more))
    single, double = workers_report.summary(measured, http, (one, many), {}, swept)
    assert single[1:5] == ["20,000", "10,000", "0.50x ✗", "2,750 ✗"]  # at 64 each
    assert single[5:9] == ["20,000", "16,000", "0.80x ✓", "4,400 ✗"]  # each at its best
    assert double[5:9] == ["—"] * 4  # two processes ran no sweep


def test_two_pyvoy_instances_take_only_the_cases_through_envoy() -> None:
    fits = {case.label for case in workers.CASES if case.fits((PYVOY, 2))}
    through = {case.label for case in workers.CASES if case.surface == workers.ENVOY}
    assert fits == {label for label in through if "in flight" not in label}
    assert all(case.fits((PYVOY, 1)) for case in workers.CASES)
    assert all(case.fits((AIO, 2)) for case in workers.CASES if not case.swept)


def test_the_sweep_runs_each_door_at_more_requests_in_flight_on_one_process() -> None:
    http = [(case.connections, case.swept) for case in workers.HTTP_SWEPT]
    envoy = [(case.connections, case.pool, case.swept) for case in workers.ENVOY_SWEPT]
    assert http == [(64, False), (128, True), (256, True)]
    assert envoy == [(64, ONE, False), (128, ONE, True), (256, ONE, True)]
    assert workers.HTTP_SWEPT[0] is workers.HTTP_CASE
    assert workers.ENVOY_SWEPT[0] is workers.ENVOY_CASES[0]
    for case in workers.CASES:
        if case.swept:
            assert case.fits((AIO, 1)) and case.fits((PYVOY, 1))
            assert not case.fits((AIO, 2)) and not case.fits((PYVOY, 2))


def test_envoy_asks_each_deployment_on_one_connection_or_on_many() -> None:
    listeners = {}
    for pool in (ONE, MANY):
        id_ = workers_envoy.name((PYVOY, 2), pool)
        assert id_ == f"pyvoy_w2_{pool}"
        limiter = workers_envoy.rate_limit(id_)["typed_config"]
        assert limiter["failure_mode_deny"] is False
        assert limiter["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"] == (
            f"rls_{id_}"
        )
        listeners[pool] = workers_envoy.limited(id_)["route"]["rate_limits"]
    assert listeners[ONE] == listeners[MANY]
    keys = [limit["actions"][0]["request_headers"]["descriptor_key"] for limit in listeners[ONE]]
    assert keys == ["client", "hot"]
    assert workers_envoy.name((AIO, 1), ONE) == "grpc_aio_w1_one"


def test_a_cluster_of_many_connections_bounds_its_streams_on_each() -> None:
    def options(streams: int | None) -> dict[str, int]:
        found = envoy_front.cluster("rls", 8081, True, streams)["typed_extension_protocol_options"]
        protocol = found["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        http2: dict[str, int] = protocol["explicit_http_config"]["http2_protocol_options"]
        return http2

    assert options(None) == {}
    assert options(STREAMS) == {"max_concurrent_streams": STREAMS}


def test_a_cluster_of_several_instances_lists_each_as_an_endpoint() -> None:
    found = envoy_front.cluster("rls", [8081, 8082], True)["load_assignment"]["endpoints"]
    ports = [one["endpoint"]["address"]["socket_address"]["port_value"]
             for one in found[0]["lb_endpoints"]]  # fmt: skip
    assert ports == [8081, 8082]


def test_envoy_answers_past_the_rate_limit_filter_itself() -> None:
    listener = workers_envoy.listener(
        "x",
        1,
        workers_envoy.limited("x"),
        [workers_envoy.rate_limit("x"), workers_envoy.local_reply()],
    )
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    names = [one["name"] for one in manager["http_filters"]]
    # the rate-limit filter asks first; the fault filter answers 200; the router never forwards
    assert names == ["envoy.filters.http.ratelimit", "envoy.filters.http.fault",
                     "envoy.filters.http.router"]  # fmt: skip
    abort = manager["http_filters"][1]["typed_config"]["abort"]
    assert abort == {"http_status": 200, "percentage": {"numerator": 100, "denominator": "HUNDRED"}}
    assert "cluster" in manager["route_config"]["virtual_hosts"][0]["routes"][0]["route"]


def test_the_deployments_of_one_process_run_alone_then_those_of_two() -> None:
    assert workers._groups(workers.DEPLOYMENTS) == [
        ((AIO, 1), (PYVOY, 1)),
        ((AIO, 2), (PYVOY, 2)),
    ]
    assert workers._groups(((AIO, 1), (AIO, 2))) == [((AIO, 1),), ((AIO, 2),)]
    assert workers._groups(((PYVOY, 2),)) == [((PYVOY, 2),)]
