"""The mergeable frequent-keys summary: exact while the keys fit, and past that every count a
lower bound at most ``error`` below the truth, ``error`` never above ``total // (capacity + 1)``,
merged summaries included."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratekeeper.core.frequent import Summary


def test_counts_that_fit_are_exact() -> None:
    summary = Summary.of({"a": 3, "b": 1}, capacity=2)
    assert (summary.total, summary.error, dict(summary.counts)) == (4, 0, {"a": 3, "b": 1})
    assert summary.top(5) == [("a", 3), ("b", 1)]


def test_past_its_capacity_the_next_largest_count_is_taken_off_every_key() -> None:
    summary = Summary.of({"a": 5, "b": 3, "c": 2, "d": 1}, capacity=2)
    # the third largest, 2, comes off every key: c and d go, a and b stay at 3 and 1
    assert dict(summary.counts) == {"a": 3, "b": 1}
    assert (summary.total, summary.error, summary.bound) == (11, 2, 3)
    more = summary.merged((), {"b": 4, "e": 1})  # a 3, b 5, e 1: the cut is 1
    assert dict(more.counts) == {"a": 2, "b": 4}
    assert (more.total, more.error, more.bound) == (16, 3, 5)  # a is 5: 2 <= 5 <= 2 + 3


def test_ties_are_listed_by_key() -> None:
    assert Summary.of({"b": 2, "a": 2, "c": 3}, 5).top(3) == [("c", 3), ("a", 2), ("b", 2)]


def test_a_summary_reads_back_as_it_was_written() -> None:
    summary = Summary.of({"a": 5, "b": 3, "c": 2, "d": 1}, capacity=2)
    assert Summary.from_dict(summary.to_dict()) == summary


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True])
def test_a_capacity_below_one_or_not_whole_is_refused(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity"):
        Summary(capacity)  # type: ignore[arg-type]


streams = st.lists(
    st.lists(st.sampled_from("abcdefghijklmnop"), max_size=60), min_size=1, max_size=6
)


@settings(max_examples=300, deadline=None)
@given(streams, st.integers(min_value=1, max_value=6))
def test_merged_summaries_keep_every_count_within_the_bound(
    parts: list[list[str]], capacity: int
) -> None:
    summaries = [Summary.of(Counter(part), capacity) for part in parts]
    merged = Summary(capacity).merged(summaries)
    truth = Counter(key for part in parts for key in part)
    assert merged.total == sum(truth.values())
    assert len(merged.counts) <= capacity
    assert merged.error <= merged.bound
    for key, count in truth.items():
        found = merged.counts.get(key, 0)
        assert found <= count <= found + merged.error
    for key in merged.counts:
        assert key in truth


def test_a_zipf_stream_folded_in_batches_finds_its_heavy_keys() -> None:
    rng = random.Random(7)
    keys = [f"user:{n}" for n in range(20_000)]
    weights = [1 / (rank + 1) for rank in range(len(keys))]
    stream = rng.choices(keys, weights, k=200_000)
    summary = Summary(200)
    for start in range(0, len(stream), 5_000):
        summary = summary.merged((), Counter(stream[start : start + 5_000]))
    truth = Counter(stream)
    assert summary.error <= summary.bound == 200_000 // 201
    heavy = [key for key, count in truth.items() if count > summary.error]
    assert heavy and all(key in summary.counts for key in heavy)
    for key, count in truth.items():
        found = summary.counts.get(key, 0)
        assert found <= count <= found + summary.error
