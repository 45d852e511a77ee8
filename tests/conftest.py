"""Fixtures shared by the whole suite."""

from __future__ import annotations

import pytest

from ratekeeper.testing import FakeClock

#: A fixed epoch-sized instant: 2023-11-14 22:13:20 UTC.
T0 = 1_700_000_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)
