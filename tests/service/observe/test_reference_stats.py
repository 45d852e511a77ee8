"""envoyproxy/ratelimit's statistics counted in process, as its ``base_limiter.go`` counts them,
and sent to real StatsD (TCP) and DogStatsD (UDP) listeners on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ratekeeper.core.errors import MissingExtraError
from ratekeeper.core.limits import Limit
from ratekeeper.engine import Descriptor, Engine
from ratekeeper.rules import parse_rules
from ratekeeper.service.observe.stats import Publisher, ReferenceStats
from ratekeeper.service.observe.stats.counts import tag_suffix
from ratekeeper.service.observe.stats.sinks import DogStatsdSink, StatsdSink, mogrifiers, require
from tests.service.observe.stats_listeners import TcpLines, UdpLines

RULES = """
domain: rl
descriptors:
  - key: unspec
    value_to_metric: true
    rate_limit: {requests_per_unit: 3, unit: minute}
  - key: ten
    rate_limit: {requests_per_unit: 10, unit: minute}
  - key: shadowed
    shadow_mode: true
    rate_limit: {requests_per_unit: 2, unit: minute}
  - key: free
    rate_limit: {unlimited: true}
  - key: zero
    rate_limit: {requests_per_unit: 0, unit: minute}
  - key: pass
"""
STAT = "ratelimit.service.rate_limit."


def counted(debt: bool = True) -> tuple[Engine, ReferenceStats]:
    engine = Engine(rules=parse_rules(RULES), debt=debt)
    stats = ReferenceStats(engine)
    stats.track()
    return engine, stats


def stats_of(taken: dict[str, int], key: str) -> dict[str, int]:
    prefix = f"{STAT}{key}."
    return {name.removeprefix(prefix): n for name, n in taken.items() if name.startswith(prefix)}


@pytest.mark.parametrize("debt", [True, False])
def test_five_hits_on_three_a_minute(debt: bool) -> None:
    engine, stats = counted(debt)
    for _ in range(5):
        engine.check("rl", [[("unspec", "unspecified_value")]])
    taken = stats.take()
    assert stats_of(taken, "rl.unspec_unspecified_value") == {
        "total_hits": 5,
        "within_limit": 3,
        "near_limit": 1,  # the 3rd hit: past floor(3 x 0.8) = 2
        "over_limit": 2,
    }
    assert taken["ratelimit.service.config_load_success"] == 1
    assert stats.take() == {}
    assert stats.totals[f"{STAT}rl.unspec_unspecified_value.total_hits"] == 5


def test_hits_addend_counts_each_hit_as_the_reference() -> None:
    engine, stats = counted(debt=True)
    for cost in (3, 3, 2, 1, 1, 4, 2):  # the counter: 3 6 8 9 10 14 16 of 10
        engine.check("rl", [[("ten", "x")]], hits=cost)
    assert stats_of(stats.take(), "rl.ten") == {
        "total_hits": 16,
        "within_limit": 10,
        "near_limit": 2,  # the 9th and the 10th, past floor(10 x 0.8) = 8
        "over_limit": 6,
    }


def test_a_request_crossing_the_limit_splits_its_hits_without_debt() -> None:
    engine, stats = counted(debt=False)
    engine.check("rl", [[("ten", "x")]], hits=6)
    engine.check("rl", [Descriptor((("ten", "x"),), hits=6)])  # 6 + 6 = 12 of 10
    assert stats_of(stats.take(), "rl.ten") == {
        "total_hits": 12,
        "within_limit": 6,
        "near_limit": 2,  # 9 and 10
        "over_limit": 2,  # 11 and 12
    }


def test_shadow_mode_counts_what_it_lets_through() -> None:
    engine, stats = counted()
    answers = [engine.check("rl", [[("shadowed", "a")]]).allowed for _ in range(4)]
    assert answers == [True] * 4
    assert stats_of(stats.take(), "rl.shadowed") == {
        "total_hits": 4,
        "within_limit": 2,
        "near_limit": 1,
        "over_limit": 2,
        "shadow_mode": 2,
    }


def test_what_no_limit_counts_counts_nothing_and_an_unknown_domain_is_named() -> None:
    engine, stats = counted()
    engine.check("rl", [[("free", "a")], [("pass", "b")], [("nothing", "c")]])
    engine.check("elsewhere", [[("a", "1")], [("b", "2")]])
    engine.check("rl", [[("zero", "a")]], hits=2)  # requests_per_unit 0: always over
    taken = stats.take()
    assert taken.pop("ratelimit.service.config_load_success") == 1
    assert taken == {
        f"{STAT}elsewhere.domain_not_found": 2,
        f"{STAT}rl.zero.total_hits": 2,
        f"{STAT}rl.zero.over_limit": 2,
    }


def test_a_limit_sent_with_the_descriptor_counts_under_its_entries() -> None:
    engine, stats = counted()
    sent = Descriptor((("ten", "x"), ("ip", "10.0.0.1")), limit=Limit(1, 60))
    engine.check("rl", [sent])
    engine.check("rl", [sent])
    assert stats_of(stats.take(), "rl.ten_x.ip_10_0_0_1") == {
        "total_hits": 2,
        "within_limit": 1,
        "near_limit": 1,  # past floor(1 x 0.8) = 0
        "over_limit": 1,
    }


def test_extra_tags_end_every_name_as_gostats_writes_them() -> None:
    assert tag_suffix({"b": "x.y:z", "a": "1", "": "no", "c": ""}) == ".__a=1.__b=x_y_z"
    engine = Engine(rules=parse_rules(RULES))
    stats = ReferenceStats(engine, tags={"env": "prod", "az": "eu-1"})
    stats.track()
    engine.check("rl", [[("ten", "x")]])
    assert f"{STAT}rl.ten.total_hits.__az=eu-1.__env=prod" in stats.take()


@pytest.fixture
def tcp() -> Iterator[TcpLines]:
    listener = TcpLines()
    yield listener
    listener.close()


@pytest.fixture
def udp() -> Iterator[UdpLines]:
    listener = UdpLines()
    yield listener
    listener.close()


def test_statsd_gets_each_flush_over_tcp(tcp: TcpLines) -> None:
    engine, stats = counted()
    publisher = Publisher(stats, [StatsdSink("127.0.0.1", tcp.port)], interval=3600)
    for _ in range(5):
        engine.check("rl", [[("unspec", "v")]])
    publisher.flush()
    counts = tcp.wait_for(f"{STAT}rl.unspec_v.total_hits", 5)
    engine.check("rl", [[("unspec", "v")]])
    publisher.close()  # the last flush
    counts = tcp.wait_for(f"{STAT}rl.unspec_v.total_hits", 6)
    assert counts[f"{STAT}rl.unspec_v.over_limit"] == 3
    assert counts[f"{STAT}rl.unspec_v.within_limit"] == 3
    assert counts["ratelimit.service.config_load_success"] == 1
    assert all(line.endswith(("|c",)) for line in tcp.lines)
    assert tcp.connections == 1  # one connection, kept between flushes


def test_statsd_sends_every_line_of_a_large_flush_and_a_name_in_utf8(tcp: TcpLines) -> None:
    sink = StatsdSink("127.0.0.1", tcp.port)
    counts = {f"{STAT}rl.user_{n:05d}-{'x' * 40}.total_hits": n + 1 for n in range(3000)}
    counts[f"{STAT}rl.user_zoë.total_hits"] = 7
    sink.send(counts)
    sink.close()
    assert tcp.wait_for(f"{STAT}rl.user_zoë.total_hits", 7) == counts


def test_statsd_that_does_not_listen_drops_the_flush_without_failing() -> None:
    listener = TcpLines()
    port = listener.port
    listener.close()
    sink = StatsdSink("127.0.0.1", port)
    sink.send({"a.b": 1})  # refused: logged, dropped
    sink.close()


def test_dogstatsd_gets_tags_and_mogrified_names_over_udp(udp: UdpLines) -> None:
    environ = {
        "DOG_STATSD_MOGRIFIER_HITS_PATTERN": r"^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$",
        "DOG_STATSD_MOGRIFIER_HITS_NAME": "ratelimit.service.rate_limit.$3",
        "DOG_STATSD_MOGRIFIER_HITS_TAGS": "domain:$1,descriptor:$2",
    }
    engine = Engine(rules=parse_rules(RULES))
    stats = ReferenceStats(engine, tags={"env": "prod"})
    stats.track()
    sink = DogStatsdSink("127.0.0.1", udp.port, mogrifiers(["HITS"], environ))
    for _ in range(4):
        engine.check("rl", [[("unspec", "v")]])
    sink.send(stats.take())
    sink.close()
    counts = udp.wait_for(
        "ratelimit.service.rate_limit.total_hits|#env:prod,domain:rl,descriptor:unspec_v", 4
    )
    assert (
        counts["ratelimit.service.rate_limit.over_limit|#env:prod,domain:rl,descriptor:unspec_v"]
        == 1
    )
    assert counts["ratelimit.service.config_load_success|#env:prod"] == 1


def test_a_mogrifier_without_its_variables_is_refused() -> None:
    with pytest.raises(ValueError, match="DOG_STATSD_MOGRIFIER_X_PATTERN"):
        mogrifiers(["X"], {})
    with pytest.raises(ValueError, match="DOG_STATSD_MOGRIFIER_X_NAME"):
        mogrifiers(["X"], {"DOG_STATSD_MOGRIFIER_X_PATTERN": "a"})


def test_a_missing_client_names_the_extra_to_install() -> None:
    with pytest.raises(
        MissingExtraError,
        match=r"nosuchstatsd is not installed; install it with: "
        r"pip install 'ratekeeper\[statsd\]'",
    ):
        require("nosuchstatsd.client")
