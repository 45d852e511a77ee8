"""Per-route limits on Django views, through Django's test client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.web import django_site


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    django_site.store.clear()
    yield


def test_a_users_premium_stories_are_limited_across_views() -> None:
    from django.test import Client

    alice, bob = Client(headers={"X-User": "alice"}), Client(headers={"X-User": "bob"})
    answers = [alice.get(p) for p in ["/stories/a", "/videos/b", "/stories/c", "/stories/d"]]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].json() == {"story": "a"}
    assert answers[0]["X-RateLimit-Limit"] == "3"
    assert answers[2]["X-RateLimit-Remaining"] == "0"
    assert answers[3]["Content-Type"] == "application/problem+json"
    assert answers[3]["Retry-After"] == "86400"  # a month away: at most a day is said
    assert answers[3].json()["status"] == 429
    assert bob.get("/stories/a").status_code == 200
    # Anonymous readers have no user key: this limit does not count them.
    anonymous = Client()
    assert [anonymous.get("/stories/a").status_code for _ in range(5)] == [200] * 5


def test_the_route_template_and_address_count_together() -> None:
    from django.test import Client

    here = Client(REMOTE_ADDR="198.51.100.1")
    there = Client(REMOTE_ADDR="198.51.100.2")
    statuses = [here.get(f"/items/{n}").status_code for n in range(3)]
    assert statuses == [200, 200, 429]
    assert there.get("/items/9").status_code == 200


def test_a_login_form_is_read_for_its_key_and_still_reaches_the_view() -> None:
    from django.test import Client

    here = Client()
    first = here.post("/login", {"username": "alice"})
    assert first.status_code == 200 and first.json() == {"welcome": "alice"}
    assert here.post("/login", {"username": "alice"}).status_code == 200
    assert here.post("/login", {"username": "alice"}).status_code == 429
    assert here.post("/login", {"username": "bob"}).status_code == 200
    assert here.post("/login", {"username": "carol"}).status_code == 429  # the IP's 3
