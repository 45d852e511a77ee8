"""The one registry of algorithms: every fact the rest derives is read from it."""

import re
from importlib import import_module
from importlib.resources import files

import pytest

from ratekeeper import Algorithm, InvalidLimitError, Limit
from ratekeeper.core.registry import Spec, bind, spec
from ratekeeper.core.store_keys import limit_tag
from ratekeeper.stores.redis.scripts import LIBRARY, REFUND, RELEASE, SINGLE, SOURCE, expand


@pytest.mark.parametrize("algorithm", list(Algorithm))
def test_each_algorithm_is_its_module_and_its_twin(algorithm: Algorithm) -> None:
    module = import_module(f"ratekeeper.algorithms.{algorithm.value}")
    bound = spec(algorithm)
    assert (bound.step, bound.refund) == (module.step, module.refund)
    assert bound.copy_state is getattr(module, "copy_state", None)
    assert (bound.letter, bound.takes_burst) == (module.LETTER, module.TAKES_BURST)
    twin = files("ratekeeper.algorithms").joinpath(f"{algorithm.value}.lua").read_text()
    name = algorithm.value
    assert f"local {name}, {name}_refund" in twin
    assert f"if NEEDS.{name} then" in twin


def test_letters_are_distinct_and_name_the_algorithm_in_keys() -> None:
    letters = [spec(algorithm).letter for algorithm in Algorithm]
    assert len(set(letters)) == len(letters) == len(Algorithm)
    assert limit_tag(Limit(10, 60, "gcra", burst=3)) == "g10/60,b3"
    assert limit_tag(Limit(5, 1)) == "f5/1"


def test_a_letter_taken_twice_is_refused() -> None:
    taken = spec(Algorithm.GCRA)
    clash = Spec(taken.step, taken.refund, None, spec(Algorithm.FIXED_WINDOW).letter, True)
    with pytest.raises(ValueError, match="both use letter 'f'"):
        bind(Algorithm.GCRA, clash)
    assert spec(Algorithm.GCRA) is taken


@pytest.mark.parametrize("algorithm", list(Algorithm))
def test_burst_applies_where_the_registry_says(algorithm: Algorithm) -> None:
    if spec(algorithm).takes_burst:
        assert Limit(10, 60, algorithm, burst=4).capacity == 4
    else:
        with pytest.raises(InvalidLimitError, match=f"burst does not apply to {algorithm.value}"):
            Limit(10, 60, algorithm, burst=4)


def test_the_shipped_scripts_are_written_out_from_the_registry() -> None:
    names = [algorithm.value for algorithm in Algorithm]
    shipped = [SOURCE, REFUND, RELEASE, LIBRARY[0], *SINGLE.values()]
    assert not any("--@" in source for source in shipped)
    chain = re.findall(r"if name == '(\w+)' then step = (\w+)", SOURCE)
    assert chain == [(name, name) for name in names]
    refunds = re.findall(r"^  (\w+) = (\w+)_refund,$", REFUND, re.MULTILINE)
    assert refunds == [(name, name) for name in names]
    assert sorted(SINGLE) == sorted(Algorithm)


def test_expand_writes_out_a_marker_at_its_indent() -> None:
    text = "x\n    --@refunds: one line per algorithm\ny\n"
    lines = expand(text).splitlines()
    assert lines[0] == "x" and lines[-1] == "y"
    assert lines[1:-1] == [f"    {a.value} = {a.value}_refund," for a in Algorithm]
