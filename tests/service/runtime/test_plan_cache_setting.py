"""``--plan-cache-size``: the bound on the plans each worker caches, checked, and given to the
engine."""

from __future__ import annotations

import pytest

from ratekeeper.core.errors import ConfigError
from ratekeeper.service.runtime.app import build_engine
from ratekeeper.service.runtime.serve import _environment
from ratekeeper.service.runtime.values import MAX_PLAN_CACHE_SIZE
from tests.service.runtime.command_line import read


def test_the_default_flag_and_variable() -> None:
    assert read([]).plan_cache_size == 100_000
    assert read(["--plan-cache-size", "5000"]).plan_cache_size == 5000
    assert read([], {"RATEKEEPER_PLAN_CACHE_SIZE": "2000"}).plan_cache_size == 2000
    assert (
        read(["--plan-cache-size", "7"], {"RATEKEEPER_PLAN_CACHE_SIZE": "2000"}).plan_cache_size
        == 7
    )


@pytest.mark.parametrize(
    "value",
    ["0", "-1", "nan", "inf", "-inf", "1e6", "1.5", "true", "", "²", str(MAX_PLAN_CACHE_SIZE + 1)],
)
def test_a_bad_size_is_refused_with_its_flag(value: str) -> None:
    with pytest.raises(ConfigError, match="--plan-cache-size: expected a whole number of plans"):
        read([f"--plan-cache-size={value}"])
    with pytest.raises(
        ConfigError, match=r"--plan-cache-size \(from \$RATEKEEPER_PLAN_CACHE_SIZE\): expected"
    ):
        read([], {"RATEKEEPER_PLAN_CACHE_SIZE": value})


def test_the_engine_caches_at_most_that_many_plans_and_workers_are_told() -> None:
    settings = read(["--plan-cache-size", "3", "--config", "sqlite://:memory:"])
    engine = build_engine(settings)
    try:
        for number in range(10):
            engine.planner.load_key(f"user:{number}")
        assert engine.planner.cache.maxsize == 3
        assert len(engine.planner.cache) == 3
    finally:
        engine.planner.close()
        assert engine.config is not None
        engine.config.close()
    assert _environment(settings)["RATEKEEPER_PLAN_CACHE_SIZE"] == "3"
    assert read([], _environment(settings)).plan_cache_size == 3
