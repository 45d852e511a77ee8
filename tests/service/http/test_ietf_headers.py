"""``ratekeeper serve --ietf-headers`` (``RATEKEEPER_IETF_HEADERS``): the IETF ``RateLimit`` and
``RateLimit-Policy`` fields on the service's answers, from the settings through the app."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.service.asgi import AppClient, settings_app
from tests.service.served import Served

CHECK = {"key": "user:1", "limit": "5/minute"}


@pytest.mark.parametrize("on", [False, True])
def test_the_setting_turns_the_fields_on(tmp_path: Path, on: bool) -> None:
    app = settings_app(config=f"sqlite:///{tmp_path}/config.db", ietf_headers=on)
    with AppClient(app) as client:
        answer = client.post("/v1/check", json=CHECK)
    assert answer.status_code == 200
    assert answer.headers["x-ratelimit-remaining"] == "4"
    assert ("ratelimit" in answer.headers, "ratelimit-policy" in answer.headers) == (on, on)


def test_a_served_process_sends_them(tmp_path: Path) -> None:
    served = Served(tmp_path, environ={"RATEKEEPER_IETF_HEADERS": "true"})
    try:
        with httpx.Client(base_url=served.url, timeout=10) as client:
            answers = [client.post("/v1/check", json=CHECK) for _ in range(6)]
            nginx = client.get(
                "/v1/nginx", headers={"X-Real-IP": "10.0.0.1", "X-RateLimit-Domain": "example"}
            )
    finally:
        assert served.stop() == 0
    assert [one.status_code for one in answers] == [200] * 5 + [429]
    assert [one.headers["ratelimit-policy"] for one in answers] == ['"default";q=5;w=60'] * 6
    remaining = [
        re.fullmatch(r'"default";r=(\d+);t=(\d+)', one.headers["ratelimit"]) for one in answers
    ]
    assert [int(match.group(1)) for match in remaining if match] == [4, 3, 2, 1, 0, 0]
    assert all(match and 0 <= int(match.group(2)) <= 60 for match in remaining)
    assert nginx.status_code == 200  # under the example rules' limit of each address
    assert re.fullmatch(r'"[^"]*";q=\d+;w=\d+', nginx.headers["ratelimit-policy"])
    assert re.fullmatch(r'"[^"]*";r=\d+;t=\d+', nginx.headers["ratelimit"])
