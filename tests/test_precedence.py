"""The precedence docs/precedence.md states, for the rows no other test holds: which level wins
when a setting is given at several (a limit, a rule, the engine, the service's flags and
variables, a store's keywords and URL), each checked on a fake clock or without a server."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ratekeeper import (
    InvalidLimitError,
    Limit,
    Limiter,
    MemoryStore,
    RemoteLimiter,
    StoreConfigError,
    open_store,
)
from ratekeeper.cli import main
from ratekeeper.config import open_config_store
from ratekeeper.engine import Engine
from ratekeeper.rules import parse_rules
from ratekeeper.service.runtime.flags import add_arguments
from ratekeeper.service.runtime.settings import Settings
from ratekeeper.testing import FakeClock
from tests.service.runtime.command_line import read

#: A boundary of the clock's minute windows (a multiple of 60 s since the epoch).
BOUNDARY = 1_700_000_040.0


# -- what a limit counts by -----------------------------------------------------------------


def test_a_limit_names_its_own_algorithm_and_the_limiters_counts_rate_strings() -> None:
    """``Limiter(algorithm=...)`` reads rate strings; a ``Limit`` keeps its own (here a fixed
    window, which starts afresh at the boundary where a sliding log still remembers)."""
    clock = FakeClock(BOUNDARY - 1)
    limiter = Limiter(MemoryStore(clock=clock), algorithm="sliding_log")
    assert limiter.hit("string", "1/minute").allowed
    assert limiter.hit("limit", Limit(1, 60)).allowed
    clock.set(BOUNDARY + 1)
    assert not limiter.hit("string", "1/minute").allowed  # sliding_log: 2 s ago still counts
    assert limiter.hit("limit", Limit(1, 60)).allowed  # fixed_window: a new window


DEBT_RULES = """
domain: api
descriptors:
  - key: owing
    rate_limit: {unit: minute, requests_per_unit: 1, debt: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1, debt: false}
  - key: hot
    rate_limit: {unit: minute, requests_per_unit: 1, sync: leased}
"""


def counted(engine: Engine, key: str) -> list[tuple[bool, int]]:
    """Three hits on one descriptor: whether each was allowed, and what it counted."""
    answers = [engine.check("api", [[(key, "x")]]).statuses[0].decision for _ in range(3)]
    return [(one.allowed, one.granted) for one in answers if one is not None]


def test_debt_is_on_where_any_level_turns_it_on_and_no_level_turns_it_off() -> None:
    clock = FakeClock(BOUNDARY)
    rules = parse_rules(DEBT_RULES, "rules.yaml")
    owing = [(True, 1), (False, 1), (False, 1)]
    stopping = [(True, 1), (False, 0), (False, 0)]
    with Engine(MemoryStore(clock=clock), rules=rules) as without:
        assert counted(without, "owing") == owing  # the rule's debt, with the engine's off
        assert counted(without, "plain") == stopping
    with Engine(MemoryStore(clock=clock), rules=rules, debt=True) as with_debt:
        assert counted(with_debt, "plain") == owing  # "debt: false" leaves the engine's on


def test_the_engines_debt_decides_a_leased_rule_exactly() -> None:
    rules = parse_rules(DEBT_RULES, "rules.yaml")
    with Engine(rules=rules, debt=True) as engine:
        limit = engine.check("api", [[("hot", "x")]]).statuses[0].limit
    assert limit is not None and (limit.debt, limit.sync) == (True, "exact")
    with Engine(rules=rules) as engine:
        limit = engine.check("api", [[("hot", "x")]]).statuses[0].limit
    assert limit is not None and (limit.debt, limit.sync) == (False, "leased")


def test_a_limit_with_debt_is_not_sent_to_a_service() -> None:
    """The service counts every hit for all its limits (``--debt``) or for none."""
    limiter = RemoteLimiter("http://127.0.0.1:1", timeout=0.2)
    try:
        with pytest.raises(InvalidLimitError, match="ratekeeper serve --debt"):
            limiter.hit("k", Limit(5, 60, debt=True))
    finally:
        limiter.close()


# -- request stores: keywords and the URL ------------------------------------------------------


def test_lease_options_given_in_code_win_over_the_urls() -> None:
    url = "redis://127.0.0.1:1/0?lease_ttl=2&lease_horizon=0.02&lease_share=0.2"
    store = open_store(url, lease_ttl=3.0)
    try:
        leasing = store.store  # type: ignore[attr-defined]
        assert (leasing.ttl, leasing.horizon, leasing.share) == (3.0, 0.02, 0.2)
    finally:
        store.close()


def test_redis_py_options_in_the_url_win_over_those_given_in_code() -> None:
    """The options ratekeeper does not read itself go to redis-py, which takes the URL's over
    a keyword's; its ``?db=`` wins over the path's database, and both over ``db=``."""
    urls = {
        "redis://127.0.0.1:1/2?db=3&health_check_interval=5": (3, 5),
        "redis://127.0.0.1:1/2": (2, 7),
        "redis://127.0.0.1:1": (5, 7),
    }
    for url, (db, interval) in urls.items():
        store = open_store(url, db=5, health_check_interval=7)
        try:
            client = store.store.store.client  # type: ignore[attr-defined]
            given = client.connection_pool.connection_kwargs
            assert (given["db"], given["health_check_interval"]) == (db, interval), url
        finally:
            store.close()
    with pytest.raises(StoreConfigError, match="on_store_error"):  # a keyword, never the URL's
        open_store("redis://127.0.0.1:1/0?on_store_error=deny")


# -- the service's settings ------------------------------------------------------------------


@pytest.fixture
def reference(tmp_path: Path) -> dict[str, str]:
    """The variables of a deployment of envoyproxy/ratelimit, with a rule file in its runtime
    directory."""
    config = tmp_path / "runtime" / "ratelimit" / "config"
    config.mkdir(parents=True)
    (config / "rules.yaml").write_text(
        "domain: api\ndescriptors:\n  - key: user\n"
        "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
    )
    return {
        "RUNTIME_ROOT": str(tmp_path / "runtime"),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": "redis.internal:6379",
    }


def test_ratekeeper_variables_win_over_the_references_switches(reference: dict[str, str]) -> None:
    assert read([], reference).debt is True  # the reference counts every hit by default
    environ = {**reference, "SHADOW_MODE": "true", "LOG_LEVEL": "debug"}
    settings = read(
        [],
        {
            **environ,
            "RATEKEEPER_DEBT": "false",
            "RATEKEEPER_SHADOW_MODE": "false",
            "RATEKEEPER_LOG_LEVEL": "warning",
        },
    )
    assert settings.compat == "envoy-ratelimit"
    assert (settings.debt, settings.shadow_mode, settings.log_level) == (False, False, "warning")
    assert read(["--log-level", "error"], environ).log_level == "error"
    assert read([], environ).log_level == "debug"


def test_the_compat_flag_wins_over_its_variable_and_an_empty_variable_is_unset(
    reference: dict[str, str],
) -> None:
    assert read(["--compat", "none"], {**reference, "RATEKEEPER_COMPAT": "envoy-ratelimit"}) == (
        Settings()
    )
    plain = {"REDIS_URL": "10.0.0.1:6379"}  # no RUNTIME_ROOT: none, unless asked
    asked = read(["--compat", "envoy-ratelimit"], {**reference, "RATEKEEPER_COMPAT": "none"})
    assert asked.compat == "envoy-ratelimit"
    assert read([], {**reference, "RATEKEEPER_COMPAT": ""}).compat == "envoy-ratelimit"
    assert read([], {**plain, "RATEKEEPER_COMPAT": ""}).compat == "none"


def test_an_empty_url_variable_counts_as_unset() -> None:
    """``RATEKEEPER_STORE`` and ``RATEKEEPER_CONFIG`` set but empty are no URL: the default
    holds, as ``ratekeeper limits`` reads ``RATEKEEPER_CONFIG``."""
    settings = read([], {"RATEKEEPER_STORE": "", "RATEKEEPER_CONFIG": ""})
    assert (settings.store, settings.config) == (Settings().store, Settings().config)
    assert "store" not in settings.sources and "config" not in settings.sources


def test_a_switch_flag_only_turns_its_setting_on() -> None:
    """A switch's flag takes no value: with its variable true, the flag cannot turn it off."""
    settings = read(["--shadow-mode"], {"RATEKEEPER_SHADOW_MODE": "false"})
    assert settings.shadow_mode is True
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).shadow_mode is None  # not given: the variable decides


# -- the operator command --------------------------------------------------------------------


def test_the_limits_commands_config_flag_wins_over_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    flag, variable = f"sqlite:///{tmp_path / 'flag.db'}", f"sqlite:///{tmp_path / 'variable.db'}"
    monkeypatch.setenv("RATEKEEPER_CONFIG", variable)
    assert main(["limits", "--config", flag, "set", "k", "--capacity", "5", "--window", "1"]) == 0
    assert main(["limits", "set", "j", "--capacity", "5", "--window", "1"]) == 0
    monkeypatch.setenv("RATEKEEPER_CONFIG", "")  # empty: as if unset
    assert main(["limits", "set", "i", "--capacity", "5", "--window", "1"]) == 0
    stores = {
        url: open_config_store(url)
        for url in (flag, variable, f"sqlite:///{tmp_path / 'ratekeeper.db'}")
    }
    try:
        assert [[key for _, key, _ in store.items()] for store in stores.values()] == [
            ["k"],
            ["j"],
            ["i"],
        ]
    finally:
        for store in stores.values():
            store.close()
