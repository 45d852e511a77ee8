"""Hypothesis strategies shared by the unit and parity suites."""

from __future__ import annotations

from hypothesis import strategies as st

from ratekeeper.algorithms import Algorithm
from ratekeeper.core.limits import CALENDAR_PERIODS, NO_DEBT, Limit, with_debt

PERIODS = (0.1, 1.0, 7.5, 60.0, 3600.0)
#: Granularities of the bucketed window, as fractions of its period (None: the default 1/60).
FRACTIONS = (None, 1.0, 0.5, 0.3, 0.1, 1 / 7, 0.01)

amounts = st.integers(1, 20)
periods = st.sampled_from(PERIODS)
bursts = st.none() | st.integers(1, 20)


def limits(algorithm: Algorithm, *, debt: bool = False) -> st.SearchStrategy[Limit]:
    """Limits of ``algorithm`` with small amounts and every parameter it takes; with ``debt``,
    half of them with debt (``Limit(debt=True)``) where the algorithm can hold one."""
    plain = _limits(algorithm)
    if not debt or algorithm in NO_DEBT:
        return plain
    return st.tuples(plain, st.booleans()).map(
        lambda drawn: with_debt(drawn[0]) if drawn[1] else drawn[0]
    )


def _limits(algorithm: Algorithm) -> st.SearchStrategy[Limit]:
    if algorithm is Algorithm.FIXED_WINDOW:
        plain = st.builds(Limit, amounts, periods, st.just(algorithm))
        calendar = st.builds(
            lambda amount, period: Limit(amount, period, algorithm, calendar=True),
            amounts,
            st.sampled_from(sorted(CALENDAR_PERIODS)),
        )
        return plain | calendar
    if algorithm is Algorithm.BUCKETED_WINDOW:
        return st.builds(
            lambda amount, period, fraction: Limit(
                amount,
                period,
                algorithm,
                granularity=None if fraction is None else period * fraction,
            ),
            amounts,
            periods,
            st.sampled_from(FRACTIONS),
        )
    if algorithm is Algorithm.TOKEN_BUCKET:
        return st.builds(
            lambda amount, period, burst, partial: Limit(
                amount, period, algorithm, burst=burst, partial=partial
            ),
            amounts,
            periods,
            bursts,
            st.booleans(),
        )
    if algorithm in (Algorithm.GCRA, Algorithm.LEAKY_BUCKET, Algorithm.LEAKY_SHAPER):
        return st.builds(
            lambda amount, period, burst: Limit(amount, period, algorithm, burst=burst),
            amounts,
            periods,
            bursts,
        )
    return st.builds(Limit, amounts, periods, st.just(algorithm))
