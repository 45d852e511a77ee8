"""What every configuration store must do: one suite, unchanged, over SQLite (a file) and a
real PostgreSQL server."""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratekeeper.config import ConfigStore, open_config_store
from ratekeeper.core.errors import ConfigError, ConfigStoreError
from ratekeeper.core.limits import Limit
from ratekeeper.core.overrides import Override
from tests.config_stores import KINDS, exists, fresh_store, write_raw
from tests.servers import free_port

FIVE = Override(5, 1)
TEN = Override(10, 60, "gcra", burst=3)

Opener = Any


@pytest.fixture(params=KINDS)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    return fresh_store(request.param, request, tmp_path)


@pytest.fixture(params=KINDS)
def kind_and_unreachable(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """A store URL of each kind where no store can be: a missing directory, a closed port."""
    if request.param == "sqlite":
        return "sqlite", f"sqlite:///{tmp_path / 'missing-directory' / 'config.db'}"
    return "postgres", f"postgresql://ratekeeper:secret@127.0.0.1:{free_port()}/none"


@pytest.fixture
def store(location: tuple[str, dict[str, Any]]) -> Iterator[ConfigStore]:
    url, options = location
    store = open_config_store(url, **options)
    yield store
    store.close()


def listed(store: ConfigStore, domain: str | None = None, prefix: str = "") -> list[Any]:
    return [(d, k, o.to_dict()["capacity"]) for d, k, o in store.items(domain, prefix)]


def test_get_of_a_missing_key_is_none(store: ConfigStore) -> None:
    assert store.get("user:1") is None
    assert list(store.items()) == []


def test_set_get_overwrite(store: ConfigStore) -> None:
    store.set("user:241531", FIVE)
    assert store.get("user:241531") == FIVE
    store.set("user:241531", TEN)
    assert store.get("user:241531") == TEN
    assert list(store.items()) == [("", "user:241531", TEN)]


def test_delete_says_whether_it_existed(store: ConfigStore) -> None:
    store.set("k", FIVE)
    assert store.delete("k") is True
    assert store.get("k") is None
    assert store.delete("k") is False


def test_domains_are_namespaces(store: ConfigStore) -> None:
    store.set("k", FIVE)
    store.set("k", TEN, domain="api")
    assert store.get("k") == FIVE
    assert store.get("k", "api") == TEN
    assert store.get("k", "other") is None
    assert store.delete("k", "api") is True
    assert store.get("k") == FIVE
    assert store.delete("k", "other") is False


def test_items_sorted_by_domain_then_key(store: ConfigStore) -> None:
    for domain, key, capacity in [("b", "x", 1), ("", "z", 2), ("a", "y", 3), ("a", "b", 4)]:
        store.set(key, Override(capacity, 1), domain)
    store.set("é", Override(5, 1))
    store.set("Z", Override(6, 1))
    assert listed(store) == [
        ("", "Z", 6),
        ("", "z", 2),
        ("", "é", 5),
        ("a", "b", 4),
        ("a", "y", 3),
        ("b", "x", 1),
    ]
    assert listed(store, "a") == [("a", "b", 4), ("a", "y", 3)]
    assert listed(store, "") == [("", "Z", 6), ("", "z", 2), ("", "é", 5)]
    assert listed(store, "none") == []


def test_prefix_filters_keys_literally(store: ConfigStore) -> None:
    keys = ["user:1", "user:12", "user:2", "User:3", "user_4", "use", "user%5", "users", "u"]
    for index, key in enumerate(keys, 1):
        store.set(key, Override(index, 1))
        store.set(key, Override(index, 1), "other")
    assert [key for _, key, _ in store.items("", "user:")] == ["user:1", "user:12", "user:2"]
    assert [key for _, key, _ in store.items("", "user%")] == ["user%5"]
    assert [key for _, key, _ in store.items("", "user_")] == ["user_4"]
    assert [(d, k) for d, k, _ in store.items(None, "user:1")] == [
        ("", "user:1"),
        ("", "user:12"),
        ("other", "user:1"),
        ("other", "user:12"),
    ]
    assert list(store.items("", "nothing")) == []


def test_items_pages_through_a_long_listing(location: tuple[str, dict[str, Any]]) -> None:
    url, options = location
    store = open_config_store(url, page_size=7, **options)
    try:
        expected = []
        for domain in ("", "d"):
            for index in range(30):
                key = f"k:{index:03d}"
                store.set(key, Override(index + 1, 1), domain)
                expected.append((domain, key, index + 1))
        assert listed(store) == expected
        assert listed(store, "d", "k:01") == [("d", f"k:01{i}", 11 + i) for i in range(10)]
        assert len(list(store.items(None, "k:00"))) == 20
    finally:
        store.close()


ODD_KEYS = [
    "it's",
    'say "hi"',
    "100%",
    "a_b",
    "a:b:c:",
    "{tag}",
    "}{",
    "back\\slash",
    "ключ",
    "🔑:ユーザー",
    "tab\tnew\nline",
    "; DROP TABLE overrides; --",
    "x" * 10_000,
]


@pytest.mark.parametrize("key", ODD_KEYS, ids=range(len(ODD_KEYS)))
def test_odd_keys_and_domains(store: ConfigStore, key: str) -> None:
    store.set(key, FIVE)
    store.set(key, TEN, domain=key)
    assert store.get(key) == FIVE
    assert store.get(key, key) == TEN
    assert list(store.items(key, key)) == [(key, key, TEN)]
    assert store.delete(key) is True
    assert store.get(key) is None


@pytest.mark.parametrize(
    ("key", "domain", "message"),
    [
        ("", "", "override key must be a non-empty string, not ''"),
        (None, "", "override key must be a non-empty string, not None"),
        ("k", None, "override domain must be a string, not None"),
        ("a\x00b", "", "override key 'a\\x00b' in domain '' holds a NUL character"),
        ("k", "d\x00", "override key 'k' in domain 'd\\x00' holds a NUL character"),
        ("\udcff", "", "override key '\\udcff' in domain '' must encode as UTF-8"),
        ("k", "\udcff", "override key 'k' in domain '\\udcff' must encode as UTF-8"),
    ],
)
def test_bad_keys_are_refused(store: ConfigStore, key: Any, domain: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        store.set(key, FIVE, domain)
    assert str(caught.value) == message
    with pytest.raises(ConfigError):
        store.get(key, domain)
    with pytest.raises(ConfigError):
        store.delete(key, domain)


@pytest.mark.parametrize("override", [None, {"capacity": 5, "time_window_sec": 1}, "5/s"])
def test_a_value_that_is_no_override_is_refused_before_anything_is_written(
    store: ConfigStore, override: Any
) -> None:
    message = f"an override is an Override, not {override!r}"
    with pytest.raises(ConfigError) as caught:
        store.set("k", override)
    assert str(caught.value) == message
    with pytest.raises(ConfigError) as caught:
        store.set_many([("a", FIVE), ("b", override)])
    assert str(caught.value) == message
    assert list(store.items()) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": -1}, "timeout must be positive seconds, not -1"),
        ({"timeout": math.nan}, "timeout must be positive seconds, not nan"),
        ({"timeout": "5"}, "timeout must be positive seconds, not '5'"),
        ({"timeuot": 5}, "unexpected keyword argument 'timeuot'"),
    ],
)
def test_a_bad_option_is_refused_when_the_store_is_opened(
    location: tuple[str, dict[str, Any]], options: dict[str, Any], message: str
) -> None:
    url, _ = location
    with pytest.raises(ConfigError, match=re.escape(message)):
        open_config_store(url, **options)


def test_changes_survive_reopening(location: tuple[str, dict[str, Any]]) -> None:
    url, options = location
    first = open_config_store(url, **options)
    first.set("kept", FIVE, "d")
    first.set("gone", TEN)
    first.delete("gone")
    first.close()
    second = open_config_store(url, **options)
    try:
        assert list(second.items()) == [("d", "kept", FIVE)]
    finally:
        second.close()


def test_subscribe_sees_own_changes_synchronously(store: ConfigStore) -> None:
    seen: list[tuple[str | None, str | None]] = []
    store.subscribe(lambda domain, key: seen.append((domain, key)))
    store.set("k", FIVE, "d")
    assert seen == [("d", "k")]
    store.set("k", TEN, "d")
    assert seen == [("d", "k")] * 2
    assert store.delete("k", "d")
    assert seen == [("d", "k")] * 3
    assert not store.delete("k", "d")  # nothing changed: nothing reported
    assert seen == [("d", "k")] * 3


def test_every_subscriber_is_called_and_failures_are_logged(
    store: ConfigStore, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str | None] = []

    def broken(domain: str | None, key: str | None) -> None:
        raise RuntimeError("callback bug")

    store.subscribe(broken)
    store.subscribe(lambda domain, key: seen.append(key))
    with caplog.at_level(logging.ERROR, logger="ratekeeper.config"):
        store.set("k", FIVE)
    assert seen == ["k"]
    assert store.get("k") == FIVE
    assert "configuration change callback" in caplog.text
    assert "callback bug" in caplog.text


def test_threads_share_one_store(store: ConfigStore) -> None:
    def write(thread: int) -> None:
        for index in range(50):
            store.set(f"t{thread}:{index}", Override(index + 1, 1), "threads")
            assert store.get(f"t{thread}:{index}", "threads") == Override(index + 1, 1)

    workers = [threading.Thread(target=write, args=(thread,)) for thread in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert len(list(store.items("threads"))) == 400


def test_close_stops_the_change_thread(location: tuple[str, dict[str, Any]]) -> None:
    url, options = location
    store = open_config_store(url, **options)
    before = set(threading.enumerate())
    store.subscribe(lambda domain, key: None)
    started = [t for t in threading.enumerate() if t not in before]
    assert len(started) == 1 and started[0].daemon
    store.close()
    assert not started[0].is_alive()


def test_set_many_writes_every_pair_in_one_go(store: ConfigStore) -> None:
    seen: list[tuple[str | None, str | None]] = []
    store.subscribe(lambda domain, key: seen.append((domain, key)))
    store.set("b", FIVE, "d")
    done: list[int] = []
    pairs = [(f"k:{index:04d}", Override(index + 1, 1)) for index in range(2_500)]
    assert store.set_many([("b", TEN), *pairs], "d", progress=done.append) == 2_501
    assert done == [1_000, 2_000, 2_501]
    assert store.get("b", "d") == TEN
    assert store.get("k:2499", "d") == Override(2_500, 1)
    assert len(list(store.items("d"))) == 2_501
    assert seen == [("d", "b"), (None, None)]  # more than 1,000 keys: reported once, coarsely
    seen.clear()
    assert store.set_many({"x": FIVE, "y": TEN}) == 2  # a mapping works too
    assert seen == [("", "x"), ("", "y")]
    assert store.set_many([], "d") == 0
    assert seen == [("", "x"), ("", "y")]


def test_set_many_checks_every_key_before_writing(store: ConfigStore) -> None:
    store.set("a", FIVE)
    with pytest.raises(ConfigError) as caught:
        store.set_many([("a", TEN), ("b", TEN), ("", TEN), ("c", TEN)])
    assert str(caught.value) == "override key must be a non-empty string, not ''"
    assert list(store.items()) == [("", "a", FIVE)]


def test_set_many_is_all_or_nothing(
    store: ConfigStore, location: tuple[str, dict[str, Any]]
) -> None:
    store.set("k:0000", FIVE)
    seen: list[Any] = []
    store.subscribe(lambda domain, key: seen.append(key))

    def interrupted(done: int) -> None:
        raise KeyboardInterrupt  # after the first batch was written, before the commit

    pairs = [(f"k:{index:04d}", TEN) for index in range(1_500)]
    with pytest.raises(KeyboardInterrupt):
        store.set_many(pairs, progress=interrupted)
    assert list(store.items()) == [("", "k:0000", FIVE)]
    assert seen == []
    url, options = location
    other = open_config_store(url, **options)
    try:
        assert list(other.items()) == [("", "k:0000", FIVE)]
    finally:
        other.close()
    store.set_many(pairs[:3])  # the store goes on
    assert store.get("k:0002") == TEN


def test_set_many_reports_after_the_commit(location: tuple[str, dict[str, Any]]) -> None:
    url, options = location
    writer, reader = open_config_store(url, **options), open_config_store(url, **options)
    try:
        found: list[Override | None] = []
        writer.subscribe(lambda domain, key: found.append(reader.get(key or "", domain or "")))
        writer.set_many([("a", FIVE), ("b", TEN)], "d")
        assert found == [FIVE, TEN]  # another connection sees what was reported
    finally:
        writer.close()
        reader.close()


INVALID = '{"capacity": 0, "time_window_sec": 1}'


def test_an_invalid_stored_override_is_named_or_skipped(
    store: ConfigStore, location: tuple[str, dict[str, Any]]
) -> None:
    url, options = location
    store.set("a", FIVE, "d")
    store.set("c", TEN, "d")
    write_raw(url, options, "d", "b", INVALID)
    write_raw(url, options, "", "z", '{"capacity": 5}')
    message = "override 'b' in domain 'd': capacity must be a positive integer, not 0"
    with pytest.raises(ConfigError) as caught:
        store.get("b", "d")
    assert str(caught.value) == message
    with pytest.raises(ConfigError) as caught:
        list(store.items("d"))
    assert str(caught.value) == message
    errors: list[ConfigError] = []
    assert list(store.items(on_invalid=errors.append)) == [("d", "a", FIVE), ("d", "c", TEN)]
    assert [str(error) for error in errors] == ["override 'z': missing time_window_sec", message]
    assert store.delete("b", "d") is True  # an invalid override can be removed
    assert list(store.items("d")) == [("d", "a", FIVE), ("d", "c", TEN)]


def test_stored_overrides_read_back_with_their_algorithm_or_the_fixed_window(
    store: ConfigStore, location: tuple[str, dict[str, Any]]
) -> None:
    url, options = location
    store.set("plain", Override.from_dict({"capacity": 5, "time_window_sec": 1}), "d")
    write_raw(
        url,
        options,
        "d",
        "named",
        '{"algorithm":"bucketed_window","capacity":5,"time_window_sec":1}',
    )
    write_raw(url, options, "d", "unnamed", '{"capacity": 5, "time_window_sec": 1}')
    write_raw(
        url, options, "d", "granular", '{"capacity": 5, "time_window_sec": 1, "granularity": 0.5}'
    )
    found = {key: override.limit for _, key, override in store.items("d")}
    assert found == {
        "named": Limit(5, 1, "bucketed_window"),
        "unnamed": Limit(5, 1, "fixed_window"),
        "granular": Limit(5, 1, "bucketed_window", granularity=0.5),
        "plain": Limit(5, 1, "fixed_window"),  # set through the store: its algorithm written
    }


def test_create_false_opens_only_an_existing_store(location: tuple[str, dict[str, Any]]) -> None:
    url, options = location
    lookup = open_config_store(url, create=False, **options)
    try:
        with pytest.raises(ConfigStoreError):
            lookup.get("k")
        with pytest.raises(ConfigStoreError):
            list(lookup.items())
        assert not exists(url, options)
    finally:
        lookup.close()
    writer = open_config_store(url, **options)
    writer.set("k", FIVE)
    writer.close()
    lookup = open_config_store(url, create=False, **options)
    try:
        assert lookup.get("k") == FIVE
        assert lookup.delete("k") is True
        lookup.set("k", TEN)
        assert list(lookup.items()) == [("", "k", TEN)]
    finally:
        lookup.close()


def test_building_a_store_opens_nothing(kind_and_unreachable: tuple[str, str]) -> None:
    _, url = kind_and_unreachable
    before = set(threading.enumerate())
    store = open_config_store(url, timeout=1.0)  # nothing there: found on first use
    assert set(threading.enumerate()) == before
    with pytest.raises(ConfigStoreError):
        store.get("k")
    store.close()
    store.close()  # closing twice is harmless


def test_ping_reads_and_changes_nothing(store: ConfigStore) -> None:
    store.ping()  # empty
    store.set("k", FIVE)
    store.ping()
    assert list(store.items()) == [("", "k", FIVE)]


def test_ping_of_a_store_that_cannot_answer_raises(kind_and_unreachable: tuple[str, str]) -> None:
    _, url = kind_and_unreachable
    down = open_config_store(url, timeout=1.0)
    with pytest.raises(ConfigStoreError):
        down.ping()
    down.close()


def test_close_twice_after_use(location: tuple[str, dict[str, Any]]) -> None:
    url, options = location
    store = open_config_store(url, **options)
    store.subscribe(lambda domain, key: None)
    store.set("k", FIVE)
    store.close()
    store.close()
