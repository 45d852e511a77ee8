"""Requests read from the bytes they came in: ``read`` knows one whole HTTP/1.1 request, alone
(its body exactly ``Content-Length`` long, ``Connection`` absent, ``keep-alive`` or ``close``),
and nothing else; ``surface_of`` knows the decision routes among them; ``answer`` is a
well-formed HTTP/1.1 answer (503 by default).
"""

from __future__ import annotations

import json

import h11
import httptools
import pytest

from ratekeeper.service.http.responses import problem_raw
from ratekeeper.service.http.shed import ROUTES, Request, answer, read, surface_of
from ratekeeper.wire.problems import Problem

BODY = b'{"key":"user:1","limit":"10/minute"}'


def request(
    method: bytes = b"POST",
    target: bytes = b"/v1/check",
    headers: list[bytes] | None = None,
    body: bytes = BODY,
    *,
    version: bytes = b"HTTP/1.1",
    length: bool = True,
) -> bytes:
    """The bytes of one request: ``headers`` (whole lines) after ``Host``, then a
    ``Content-Length`` of ``body`` (unless ``length`` is False, or there is no body)."""
    lines = [method + b" " + target + b" " + version, b"Host: rk"]
    lines += headers or []
    if length and body:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def surface(data: bytes) -> str | None:
    """The surface of the decision request ``data`` holds whole and alone, else None."""
    request = read(data)
    return None if request is None else surface_of(request)


# -- Decision requests -------------------------------------------------------------------------


def test_the_routes_are_the_decision_routes() -> None:
    assert ROUTES == {
        (b"POST", b"/v1/check"): "http",
        (b"POST", b"/v1/check/batch"): "http",
        (b"POST", b"/v1/peek"): "http",
        (b"POST", b"/json"): "http",
        (b"GET", b"/v1/nginx"): "nginx",
    }


@pytest.mark.parametrize(("method", "path"), list(ROUTES))
def test_each_decision_route_is_known_by_its_surface(method: bytes, path: bytes) -> None:
    body = b"" if method == b"GET" else BODY
    assert surface(request(method, path, body=body)) == ROUTES[(method, path)]


@pytest.mark.parametrize(("method", "path"), list(ROUTES))
def test_a_query_string_does_not_change_the_route(method: bytes, path: bytes) -> None:
    body = b"" if method == b"GET" else BODY
    target = path + b"?a=1&b=%2F"
    assert surface(request(method, target, body=body)) == ROUTES[(method, path)]


def test_nginx_s_subrequest_with_its_headers() -> None:
    data = request(
        b"GET",
        b"/v1/nginx",
        [b"X-Real-IP: 10.0.0.1", b"X-Original-URI: /x?y=1", b"Connection: keep-alive"],
        b"",
    )
    assert surface(data) == "nginx"


def test_a_get_with_a_zero_content_length() -> None:
    data = b"GET /v1/nginx HTTP/1.1\r\nHost: rk\r\nContent-Length: 0\r\n\r\n"
    assert surface(data) == "nginx"


def test_a_request_without_headers() -> None:
    assert surface(b"GET /v1/nginx HTTP/1.1\r\n\r\n") == "nginx"


def test_an_empty_post_without_a_content_length() -> None:
    assert surface(b"POST /v1/check HTTP/1.1\r\nHost: rk\r\n\r\n") == "http"


@pytest.mark.parametrize(
    "connection", [b"Connection: keep-alive", b"connection: Keep-Alive", b"CONNECTION:keep-alive  "]
)
def test_a_connection_kept_alive_is_accepted(connection: bytes) -> None:
    assert surface(request(headers=[connection])) == "http"


@pytest.mark.parametrize(
    "length",
    [b"content-length: %d", b"CONTENT-LENGTH: %d", b"Content-Length:%d", b"Content-Length:   %d  "],
)
def test_header_names_are_read_whatever_their_case(length: bytes) -> None:
    data = request(headers=[length % len(BODY)], length=False)
    assert surface(data) == "http"


def test_a_body_that_contains_header_like_text_is_only_a_body() -> None:
    body = b'{"key":"\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"}'
    assert surface(request(body=body)) == "http"


# -- What read() finds ------------------------------------------------------------------------


def test_read_gives_the_method_the_path_without_its_query_and_whether_it_closes() -> None:
    assert read(request(target=b"/v1/check?a=1?b")) == Request(b"POST", b"/v1/check", False)
    assert read(request(b"GET", b"/healthz", body=b"")) == Request(b"GET", b"/healthz", False)
    assert read(request(b"PUT", b"/x/y?", body=b"{}")) == Request(b"PUT", b"/x/y", False)


@pytest.mark.parametrize(
    "connection", [b"Connection: close", b"connection: CLOSE", b"Connection:   Close  "]
)
def test_a_connection_that_closes_is_read_as_closing(connection: bytes) -> None:
    assert read(request(headers=[connection])) == Request(b"POST", b"/v1/check", True)
    assert surface(request(headers=[connection])) == "http"


def test_a_connection_kept_alive_or_unsaid_is_read_as_kept() -> None:
    assert read(request()) == Request(b"POST", b"/v1/check", False)
    assert read(request(headers=[b"Connection: keep-alive"])) == Request(
        b"POST", b"/v1/check", False
    )


def test_surface_of_a_request_is_its_route_s() -> None:
    assert surface_of(Request(b"POST", b"/v1/check", False)) == "http"
    assert surface_of(Request(b"POST", b"/v1/check", True)) == "http"
    assert surface_of(Request(b"GET", b"/v1/nginx", False)) == "nginx"
    assert surface_of(Request(b"GET", b"/healthz", False)) is None
    assert surface_of(Request(b"GET", b"/v1/check", False)) is None


# -- Anything else goes the usual way ----------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"POST /v1/check HTTP/1.1",
        b"POST /v1/check HTTP/1.1\r\nHost: rk\r\n",
        b"POST /v1/check HTTP/1.1\r\nHost: rk\r\nContent-Length: 36\r\n",
        request()[: request().index(b"\r\n\r\n") + 2],
    ],
    ids=["nothing", "request-line", "one-header", "no-blank-line", "head-cut-at-the-end"],
)
def test_a_partial_head_is_not_known(data: bytes) -> None:
    assert read(data) is None


def test_a_body_shorter_than_its_length_is_not_known() -> None:
    data = request()
    assert read(data[:-1]) is None
    assert read(data[: data.index(b"\r\n\r\n") + 4]) is None


def test_a_body_longer_than_its_length_is_not_known() -> None:
    assert read(request() + b"x") is None
    assert read(request(b"GET", b"/v1/nginx", body=b"") + b"x") is None


def test_two_requests_at_once_are_not_known() -> None:
    assert read(request() + request()) is None
    nginx = request(b"GET", b"/v1/nginx", body=b"")
    assert read(nginx + nginx) is None
    assert read(request() + nginx) is None


@pytest.mark.parametrize("version", [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.2", b"http/1.1", b""])
def test_another_version_is_not_known(version: bytes) -> None:
    assert read(request(version=version)) is None


@pytest.mark.parametrize(
    "header",
    [
        b"Connection: upgrade",
        b"Connection: keep-alive, upgrade",
        b"Connection: close, keep-alive",
        b"Connection: te",
        b"Connection:",
        b"Transfer-Encoding: chunked",
        b"transfer-encoding: identity",
        b"Expect: 100-continue",
        b"Upgrade: websocket",
    ],
)
def test_a_request_that_changes_the_connection_or_the_body_is_not_known(header: bytes) -> None:
    assert read(request(headers=[header])) is None


@pytest.mark.parametrize(
    "headers",
    [
        [b"Connection: keep-alive", b"Connection: close"],
        [b"Connection: close", b"Connection: keep-alive"],
        [b"Connection: keep-alive", b"connection: keep-alive"],
        [b"Connection: close", b"Connection: close"],
    ],
)
def test_a_connection_header_given_twice_is_not_known(headers: list[bytes]) -> None:
    assert read(request(headers=headers)) is None


def test_a_chunked_body_is_not_known() -> None:
    body = b"5\r\nhello\r\n0\r\n\r\n"
    data = request(headers=[b"Transfer-Encoding: chunked"], body=body, length=False)
    assert read(data) is None


def test_a_length_given_twice_is_not_known() -> None:
    length = b"Content-Length: %d" % len(BODY)
    assert read(request(headers=[length], length=True)) is None
    assert read(request(headers=[length, length.lower()], length=False)) is None


@pytest.mark.parametrize("value", [b"abc", b"-36", b"+36", b"3.6e1", b"0x24", b"36 36", b""])
def test_a_length_that_is_not_a_whole_number_is_not_known(value: bytes) -> None:
    assert read(request(headers=[b"Content-Length: " + value], length=False)) is None


@pytest.mark.parametrize(
    ("method", "path"),
    [
        (b"GET", b"/healthz"),
        (b"GET", b"/readyz"),
        (b"GET", b"/metrics"),
        (b"GET", b"/healthcheck"),
        (b"POST", b"/v1/reset"),
        (b"GET", b"/v1/overrides"),
        (b"POST", b"/v1/check/"),
        (b"POST", b"/v1/checks"),
        (b"POST", b"/V1/CHECK"),
        (b"POST", b"http://rk/v1/check"),
        (b"POST", b"/v1/%63heck"),
        (b"POST", b"*"),
    ],
)
def test_another_route_is_not_known(method: bytes, path: bytes) -> None:
    body = b"" if method == b"GET" else BODY
    assert surface(request(method, path, body=body)) is None


@pytest.mark.parametrize(
    ("method", "path"),
    [
        (b"GET", b"/v1/check"),
        (b"PUT", b"/v1/check"),
        (b"post", b"/v1/check"),
        (b"HEAD", b"/v1/nginx"),
        (b"POST", b"/v1/nginx"),
        (b"GET", b"/json"),
        (b"OPTIONS", b"/v1/peek"),
    ],
)
def test_a_decision_route_by_another_method_is_not_known(method: bytes, path: bytes) -> None:
    assert surface(request(method, path)) is None


@pytest.mark.parametrize(
    "line",
    [
        b"POST  /v1/check HTTP/1.1",
        b"POST /v1/check  HTTP/1.1",
        b"POST /v1/check",
        b"\r\nPOST /v1/check HTTP/1.1",
    ],
)
def test_a_request_line_that_is_not_three_words_is_not_known(line: bytes) -> None:
    head = line + b"\r\nContent-Length: %d\r\n\r\n" % len(BODY)
    assert read(head + BODY) is None


# -- The answer --------------------------------------------------------------------------------

DATE = (b"date", b"Tue, 14 Nov 2023 22:13:20 GMT")


def overloaded_answer() -> tuple[bytes, bytes]:
    problem = Problem.of("overloaded", "the service is deciding 1 request; try again in 1 s")
    headers, payload = problem_raw(problem)
    return answer([DATE], [*headers, (b"retry-after", b"1")], payload), payload


def test_the_answer_is_a_whole_503_that_httptools_reads() -> None:
    data, payload = overloaded_answer()

    class Reader:
        def __init__(self) -> None:
            self.headers: list[tuple[bytes, bytes]] = []
            self.body = b""
            self.complete = False
            self.keep_alive: bool | None = None
            self.parser: httptools.HttpResponseParser | None = None

        def on_headers_complete(self) -> None:
            assert self.parser is not None
            self.keep_alive = self.parser.should_keep_alive()

        def on_header(self, name: bytes, value: bytes) -> None:
            self.headers.append((name, value))

        def on_body(self, body: bytes) -> None:
            self.body += body

        def on_message_complete(self) -> None:
            self.complete = True

    reader = Reader()
    parser = reader.parser = httptools.HttpResponseParser(reader)
    parser.feed_data(data)
    assert reader.complete
    assert parser.get_status_code() == 503
    assert parser.get_http_version() == "1.1"
    assert reader.keep_alive is True
    assert reader.headers == [
        DATE,
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(payload)).encode()),
        (b"retry-after", b"1"),
    ]
    assert reader.body == payload
    assert json.loads(reader.body) == {
        "type": "urn:ratekeeper:problem:overloaded",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "the service is deciding 1 request; try again in 1 s",
    }


def test_the_answer_is_a_whole_503_that_h11_reads() -> None:
    data, payload = overloaded_answer()
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="POST", target="/v1/check", headers=[("Host", "rk")]))
    connection.receive_data(data)
    response = connection.next_event()
    assert isinstance(response, h11.Response)
    assert (response.status_code, response.reason, response.http_version) == (
        503,
        b"Service Unavailable",
        b"1.1",
    )
    assert list(response.headers) == [
        DATE,
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(payload)).encode()),
        (b"retry-after", b"1"),
    ]
    body = connection.next_event()
    assert isinstance(body, h11.Data) and body.data == payload
    assert isinstance(connection.next_event(), h11.EndOfMessage)
    assert connection.next_event() is h11.NEED_DATA  # nothing after it: one answer, whole


def test_the_answer_is_exactly_its_lines() -> None:
    data = answer([(b"date", b"D"), (b"server", b"S")], [(b"x-a", b"1")], b"{}")
    assert data == b"HTTP/1.1 503 Service Unavailable\r\ndate: D\r\nserver: S\r\nx-a: 1\r\n\r\n{}"


def test_the_answer_without_default_headers() -> None:
    assert answer([], [(b"content-length", b"0")], b"") == (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"
    )


def test_an_answer_of_another_status_that_closes() -> None:
    data = answer([DATE], [(b"content-length", b"2")], b"ok", 200, close=True)
    assert data == (
        b"HTTP/1.1 200 OK\r\ndate: Tue, 14 Nov 2023 22:13:20 GMT\r\ncontent-length: 2\r\n"
        b"connection: close\r\n\r\nok"
    )
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method="GET", target="/healthz", headers=[("Host", "rk")]))
    connection.receive_data(data)
    response = connection.next_event()
    assert isinstance(response, h11.Response) and response.status_code == 200
    assert (b"connection", b"close") in list(response.headers)
    assert connection.next_event() == h11.Data(data=b"ok")
    assert isinstance(connection.next_event(), h11.EndOfMessage)
    assert connection.their_state is h11.MUST_CLOSE
