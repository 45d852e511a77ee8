"""waitress behind a proxy, on a real server: the settings docs/web.md gives count every client
apart, an IPv4 client that a dual-stack proxy reports IPv4-mapped (``::ffff:203.0.113.7``) as
that IPv4 client, and let no client choose its key. The test is the proxy, connecting from
127.0.0.1 (the page's 10.0.0.5); a client that is no proxy connects from 127.0.0.2.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ratekeeper import Limit, Limiter, MemoryStore
from ratekeeper.testing import FakeClock
from ratekeeper.web import Key, RateLimit, keys
from ratekeeper.web.wsgi import RateLimitMiddleware
from tests.web.servers import waitress_serving

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "web.md").read_text(encoding="utf-8")
#: The waitress item of the page's "What to set", its proxy at 127.0.0.1 in place of 10.0.0.5.
BULLET = re.search(r"^- \*\*waitress\*\*:.*?(?=^\S|^- )", PAGE, re.DOTALL | re.MULTILINE)
TWO_A_DAY = Limit(2, 86_400, "sliding_log")


def documented() -> tuple[list[dict[str, Any]], Key]:
    """The waitress settings (each ``serve(app, ...)``) and the key the page gives."""
    assert BULLET is not None
    text = BULLET.group(0).replace("10.0.0.5", "127.0.0.1")
    settings = [
        eval(f"dict({found})", {}) for found in re.findall(r"`serve\(app, ([^`]*)\)`", text)
    ]
    key = re.search(r"`(keys\.client_ip\([^`]*\))`", text)
    assert settings and key is not None
    return settings, eval(key.group(1), {"keys": keys})


def echo(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """The peer waitress hands the app, and the scheme."""
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{environ['REMOTE_ADDR']} {environ['wsgi.url_scheme']}".encode()]


def limited(key: Key) -> RateLimitMiddleware:
    return RateLimitMiddleware(
        echo, Limiter(MemoryStore(clock=FakeClock())), [RateLimit(TWO_A_DAY, key=key)]
    )


def send(session: httpx.Client, forwarded_for: str) -> httpx.Response:
    """A request as the proxy passes it on: the client's address appended to the header."""
    return session.get(
        "/", headers={"X-Forwarded-For": forwarded_for, "X-Forwarded-Proto": "https"}
    )


def test_the_page_gives_a_setting_and_its_variant() -> None:
    settings, key = documented()
    assert settings == [
        {"clear_untrusted_proxy_headers": False},
        {
            "trusted_proxy": "127.0.0.1",
            "trusted_proxy_headers": {"x-forwarded-proto"},
            "clear_untrusted_proxy_headers": False,
        },
    ]
    assert repr(key) == "Key(remote_address)"


@pytest.mark.parametrize("setting", [0, 1], ids=["no-proxy-handling", "scheme-only"])
def test_the_documented_waitress_settings_count_each_client_apart(setting: int) -> None:
    settings, key = documented()
    with (
        waitress_serving(limited(key), **settings[setting]) as url,
        httpx.Client(base_url=url) as proxy,
        httpx.Client(
            base_url=url, transport=httpx.HTTPTransport(local_address="127.0.0.2")
        ) as outsider,
    ):
        first = send(proxy, "::ffff:203.0.113.7")
        statuses = [
            first.status_code,
            send(proxy, "203.0.113.7").status_code,  # the same client, unmapped
            send(proxy, "::ffff:203.0.113.7").status_code,  # its third: refused
            send(proxy, "::ffff:198.51.100.9").status_code,  # another client
            send(proxy, "198.51.100.1, ::ffff:203.0.113.7").status_code,  # what it wrote: ignored
        ]
        # A peer that is no proxy is the client, whatever it writes.
        forged = [send(outsider, f"::ffff:192.0.2.{n}").status_code for n in range(3)]
    assert statuses == [200, 200, 429, 200, 429]
    assert forged == [200, 200, 429]
    scheme = "https" if "trusted_proxy" in settings[setting] else "http"
    assert first.text == f"127.0.0.1 {scheme}"  # waitress left the peer alone


def test_waitress_reading_x_forwarded_for_itself_puts_ipv4_mapped_clients_on_one_counter() -> None:
    """Why the page says not to: waitress cuts an IPv4-mapped hop at its last colon."""
    options = {"trusted_proxy": "127.0.0.1", "trusted_proxy_headers": {"x-forwarded-for"}}
    with (
        waitress_serving(limited(keys.client_ip()), **options) as url,
        httpx.Client(base_url=url) as proxy,
    ):
        answers = [send(proxy, f"::ffff:203.0.113.{n}") for n in range(3)]
    assert [answer.text for answer in answers[:2]] == ["::ffff http"] * 2
    assert [answer.status_code for answer in answers] == [200, 200, 429]  # three clients, one key
