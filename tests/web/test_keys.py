"""Key functions, their composition, and what a RateLimit checks when it is built."""

from __future__ import annotations

import pytest

from ratekeeper import InvalidInputError, InvalidLimitError
from ratekeeper.web import RateLimit, Request, keys
from ratekeeper.web.limits import exemption
from ratekeeper.web.request import joined


def request(**options: object) -> Request:
    headers = {
        "x-api-key": "k-1",
        "content-type": "application/x-www-form-urlencoded",
        "x-client-app": "app-42",
    }
    defaults: dict[str, object] = {
        "query_string": "page=2&page=3&q=",
        "user": "241531",
        "route": "/items/{id}",
        "body": b"username=Alice&password=x",
    }
    defaults.update(options)
    return Request("post", "/items/7", headers, "10.0.0.1", **defaults)  # type: ignore[arg-type]


def test_each_key_reads_its_part_of_the_request() -> None:
    seen = request()
    assert keys.client_ip().entries(seen) == (("remote_address", "10.0.0.1"),)
    assert keys.header("X-Client-App").entries(seen) == (("x-client-app", "app-42"),)
    assert keys.header("X-Client-App", "client_app")(seen) == "client_app:app-42"
    assert keys.api_key()(seen) == "api_key:k-1"
    assert keys.user()(seen) == "user:241531"
    assert keys.user(lambda r: 7)(seen) == "user:7"
    assert keys.path()(seen) == "path:/items/7"
    assert keys.route()(seen) == "route:/items/{id}"
    assert keys.route()(request(route=None)) == "route:/items/7"
    assert keys.method()(seen) == "method:POST"
    assert keys.query("page")(seen) == "page:2"
    assert keys.generic()(seen) == "generic_key:default"
    assert keys.field("username")(seen) == "username:Alice"
    assert keys.field("username", str.casefold)(seen) == "username:alice"
    assert keys.custom("plan", lambda r: "free")(seen) == "plan:free"


def test_a_key_without_a_value_is_none() -> None:
    seen = request(user=None, body=None)
    assert keys.user()(seen) is None
    assert keys.header("X-Missing")(seen) is None
    assert keys.query("q")(seen) is None  # sent empty
    assert keys.field("username")(seen) is None  # the body was not read
    assert (keys.client_ip() + keys.user()).entries(seen) is None


def test_keys_compose_and_escape() -> None:
    login = keys.client_ip() + keys.field("username", str.casefold)
    assert login.needs_body and not keys.client_ip().needs_body
    assert login.entries(request()) == (("remote_address", "10.0.0.1"), ("username", "alice"))
    assert login(request()) == "remote_address:10.0.0.1|username:alice"
    tricky = request(body=b"username=a%7Cb%3Ac")  # "a|b:c" cannot pose as two entries
    assert keys.field("username")(tricky) == "username:a%7Cb:c"
    assert repr(login) == "Key(remote_address + username)"
    with pytest.raises(TypeError):
        keys.as_key("not a key")  # type: ignore[arg-type]


def test_json_bodies_and_others() -> None:
    json_body = {"content-type": "application/json; charset=utf-8"}
    seen = Request("POST", "/", json_body, None, body=b'{"username": "bob", "n": 3, "ok": true}')
    assert seen.field("username") == "bob" and seen.field("n") == "3"
    assert seen.field("ok") is None
    assert Request("POST", "/", json_body, None, body=b"[1]").field("username") is None
    assert Request("POST", "/", json_body, None, body=b"{").field("username") is None
    plain = Request("POST", "/", {"content-type": "text/plain"}, None, body=b"username=x")
    assert plain.field("username") is None


def test_hostile_bodies_give_a_field_or_none() -> None:
    json_body = {"content-type": "application/json"}
    deep = b"[" * 100_000 + b"]" * 100_000  # past Python's recursion limit
    assert Request("POST", "/", json_body, None, body=deep).field("username") is None
    nested = b'{"username": {"a": [1]}, "n": [1]}'
    assert Request("POST", "/", json_body, None, body=nested).field("username") is None
    # A lone surrogate, which no key can hold, is replaced as an undecodable byte is.
    lone = Request("POST", "/", json_body, None, body=b'{"username": "al\\ud800ice"}')
    assert lone.field("username") == "al\ufffd\ufffd\ufffdice"
    part = (
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="username"\r\n'
        b"Content-Type: text/plain; charset=no-such-charset\r\n\r\n"
        b"bob\r\n"
        b"--XyZ--\r\n"
    )
    multipart = {"content-type": "multipart/form-data; boundary=XyZ"}
    assert Request("POST", "/", multipart, None, body=part).field("username") == "bob"


def test_repeated_headers_are_joined_in_order() -> None:
    assert joined([("X-Forwarded-For", "1.1.1.1"), ("x-forwarded-for", "2.2.2.2")]) == {
        "x-forwarded-for": "1.1.1.1, 2.2.2.2"
    }


def test_a_long_key_is_counted_under_a_bounded_counter() -> None:
    limit = RateLimit("1/second", key=keys.header("X-Client-App", "client_app"))
    one = limit.counter(Request("GET", "/", {"x-client-app": "a" * 10_000}, "10.0.0.1"), "app")
    two = limit.counter(Request("GET", "/", {"x-client-app": "a" * 9_999 + "b"}, "10.0.0.1"), "app")
    assert one is not None and two is not None
    assert one.startswith("#") and len(one) == 65 and one != two


def test_a_rate_limit_checks_itself_when_built() -> None:
    limit = RateLimit("100/day; 10/minute", methods=["post"])
    assert limit.limits == ("100/day", "10/minute")
    assert limit.applies(request()) and not limit.applies(request().__class__("GET", "/", {}, None))
    assert limit.counter(request(), "app") == "scope:app|remote_address:10.0.0.1"
    shared = RateLimit("1/second", key=keys.user(), scope="uploads")
    assert shared.counter(request(), "app") == "scope:uploads|user:241531"
    with pytest.raises(InvalidLimitError):
        RateLimit("10 per fortnight")
    with pytest.raises(InvalidInputError):
        RateLimit("1/second", cost=-1)
    with pytest.raises(TypeError):
        RateLimit("1/second", methods="POST")
    with pytest.raises(ValueError, match="scope"):
        RateLimit("1/second", scope="")
    with pytest.raises(TypeError):
        RateLimit(10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="method"):
        RateLimit("1/second", methods=["POST", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="exempt"):
        RateLimit("1/second", exempt="/health")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="shadow"):
        RateLimit("1/second", shadow="yes")  # type: ignore[arg-type]
    for name in ["", None, 5]:
        with pytest.raises(ValueError, match="header's name"):
            keys.header(name)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="header's name"):
            keys.api_key(name)  # type: ignore[arg-type]


def test_exempt_paths() -> None:
    exempt = exemption(["/health", "/static/*"])
    assert exempt is not None
    paths = ["/health", "/static/app.js", "/healthz", "/"]
    assert [exempt(Request("GET", p, {}, None)) for p in paths] == [True, True, False, False]
    assert exemption([]) is None


def test_multipart_text_fields_are_read_and_files_left_out() -> None:
    body = (
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="username"\r\n\r\n'
        b"al\xc3\xafce\r\n"
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="avatar"; filename="a.png"\r\n'
        b"Content-Type: image/png\r\n\r\n"
        b"\x89PNG\r\n"
        b"--XyZ--\r\n"
    )
    headers = {"content-type": "multipart/form-data; boundary=XyZ"}
    seen = Request("POST", "/", headers, None, body=body)
    assert seen.field("username") == "alïce"
    assert seen.field("avatar") is None


def test_headers_given_as_a_function_are_translated_once_on_first_use() -> None:
    calls: list[int] = []

    def translate() -> dict[str, str]:
        calls.append(1)
        return {"x-user": "alice"}

    seen = Request("GET", "/", translate, "10.0.0.1")
    assert calls == []
    assert keys.header("X-User")(seen) == "x-user:alice"
    assert seen.header("x-user") == "alice" and seen.headers == {"x-user": "alice"}
    assert calls == [1]
