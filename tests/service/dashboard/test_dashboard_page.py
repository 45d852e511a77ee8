"""The dashboard in a real browser: ``ratekeeper serve --dashboard`` under load, signed in
through its form, shows the abusive key first among the refused keys, and decision rates that
rise with the load and fall back once it stops; the page keeps to its Content-Security-Policy
(no error in the console) and is screenshot at laptop and phone size. With ``--workers 2`` on
Redis, whichever worker answers the page, each key shows the hits its newest decision left,
as ``/v1/peek`` finds them, and the notes under the tables say in words what the counts are.

The browser is Debian's ``chromium`` (``scripts/test.sh`` installs it), driven by Playwright's
Python API through ``executable_path``: Playwright's own browsers are never downloaded.

The README's images are this test's screenshots; from the repository's root:

    RATEKEEPER_SCREENSHOTS=docs/images \
        .venv/bin/pytest tests/service/dashboard/test_dashboard_page.py

writes ``docs/images/dashboard.png`` (1280x800, the whole page) and
``docs/images/dashboard-phone.png`` (390x844, the first screen).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from tests.servers import RedisServer, wait_until
from tests.service.served import Served
from tests.service.workers import fresh, metrics_directory, published_at, worker_pids

#: About 25 s: the server's start, 12 s of load at most, the rates falling back for 7 s.
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(60)]

TOKEN = "dashboard-token-0123456789abcdef"
RULES = """\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 20}
"""
#: The key that takes ABUSIVE of the requests, far past its 20 a second; the others share
#: ORDINARY keys and stay well under theirs.
ABUSER, ABUSIVE, ORDINARY = "mallory", 0.4, 10_000
ABUSIVE_KEY = f"user:{ABUSER}"  # as the page shows it: the descriptor's entries
#: The load: THREADS clients, each with its own keep-alive connection, for at most LOAD_SECONDS
#: and MOST_REQUESTS in all.
THREADS, LOAD_SECONDS, MOST_REQUESTS = 4, 12.0, 60_000
#: What the page must show under load (decisions a second, allowed and refused), and at most
#: once the load has stopped.
RISEN, FALLEN = 20.0, 1.0
LAPTOP, PHONE = {"width": 1280, "height": 800}, {"width": 390, "height": 844}


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError("chromium is not installed; scripts/test.sh installs Debian's chromium")
    return found


class Load:
    """Decisions asked of ``url`` from ``THREADS`` threads until ``stop()``, ``LOAD_SECONDS``
    or ``MOST_REQUESTS``: ``ABUSIVE`` of them for ``ABUSER``, the rest spread over
    ``ORDINARY`` users. ``sent`` and ``refused`` count the answers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent = self.refused = 0
        self.failures: list[BaseException] = []
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(seed,), daemon=True) for seed in range(THREADS)
        ]

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        deadline = time.monotonic() + LOAD_SECONDS
        try:
            with httpx.Client(base_url=self.url, timeout=5) as client:
                while not self._stopped.is_set() and time.monotonic() < deadline:
                    user = ABUSER if rng.random() < ABUSIVE else f"u{rng.randrange(ORDINARY)}"
                    entries = [{"key": "user", "value": user}]
                    body = {"domain": "api", "descriptors": [{"entries": entries}]}
                    status = client.post("/v1/check", json=body).status_code
                    assert status in (200, 429), status
                    with self._lock:
                        self.sent += 1
                        self.refused += status == 429
                        if self.sent >= MOST_REQUESTS:
                            self._stopped.set()
        except BaseException as error:
            self.failures.append(error)
            self._stopped.set()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES, encoding="utf-8")
    served = Served(tmp_path, "--dashboard", "--admin-token", TOKEN, "--rules", str(rules))
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium())
        try:
            yield browser
        finally:
            browser.close()


def test_the_page_shows_the_abuser_and_the_rates(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    _check_auth(served.url)
    laptop = browser.new_context(viewport=LAPTOP)
    page = laptop.new_page()
    errors = _errors_of(page)
    signing_in = page.goto(f"{served.url}/dashboard")
    assert signing_in is not None and signing_in.status == 401
    errors.clear()  # the sign-in page's own 401 is logged as one
    page.fill("input[name=token]", TOKEN)
    with page.expect_navigation():
        page.click("button[type=submit]")
    assert page.url == f"{served.url}/dashboard"
    page.wait_for_selector("#connection.live")

    load = Load(served.url).start()
    try:
        _wait(page, lambda: _rate(page, "allowed") >= RISEN and _rate(page, "refused") >= RISEN)
        _wait(page, lambda: _first_key(page, "top-refused") == ABUSIVE_KEY)
        _wait(page, lambda: _first_key(page, "top-requests") == ABUSIVE_KEY)
        assert page.query_selector("#chart polyline.series.refused") is not None
        page.wait_for_timeout(3000)  # a few more seconds of the chart for the screenshots
        _shoot(page, tmp_path / "dashboard.png", full_page=True)
        _shoot_phone(browser, served.url, tmp_path / "dashboard-phone.png")
    finally:
        load.stop()
    assert not load.failures, load.failures
    assert load.refused > 0 and load.sent > load.refused

    _wait(page, lambda: _rate(page, "allowed") <= FALLEN and _rate(page, "refused") <= FALLEN)
    assert _first_key(page, "top-refused") == ABUSIVE_KEY  # the last minute holds the load
    assert len(page.query_selector_all("#top-refused td.key")) == 1  # no ordinary key refused
    assert errors == [], errors
    laptop.close()


#: Each user's hits, under 5 a day: the first on a connection of its own, the others on one
#: kept alive, so that each of some users is decided by both workers; half the users refused.
WORKERS_RULES = """\
domain: {domain}
descriptors:
  - key: user
    rate_limit: {{unit: day, requests_per_unit: 5, name: per_user}}
"""
HITS = {f"user:w{index}": 10 if index % 2 else 3 for index in range(8)}


def test_with_two_workers_each_key_shows_its_newest_decision(
    tmp_path: Path, redis_server: RedisServer, browser: Browser
) -> None:
    domain = f"page-{uuid.uuid4().hex[:12]}"
    (tmp_path / "rules.yaml").write_text(WORKERS_RULES.format(domain=domain), encoding="utf-8")
    served = Served(
        tmp_path,
        *("--workers", "2", "--store", redis_server.url, "--rules", "rules.yaml"),
        *("--dashboard", "--admin-token", TOKEN),
    )
    try:
        pids = worker_pids(served)
        directory = metrics_directory(pids[0])
        newest = {}  # each key's remaining after its last hit, and whether that hit was refused
        for key, hits in HITS.items():
            body = _check_of(domain, key)
            with fresh(served.url) as http:
                answers = [http.post("/v1/check", json=body)]
            with httpx.Client(base_url=served.url, timeout=10) as http:
                answers += [http.post("/v1/check", json=body) for _ in range(hits - 1)]
            remaining = answers[-1].json()["statuses"][0]["remaining"]
            newest[key] = (remaining, answers[-1].status_code == 429)
        decided = time.time()
        wait_until(
            lambda: all(published_at(directory, pid) > decided for pid in pids),
            30,
            "each worker's record of every decision",
        )
        page = browser.new_context(viewport=LAPTOP).new_page()
        errors = _errors_of(page)
        page.goto(f"{served.url}/dashboard?token={TOKEN}")
        refused = {key: one for key, one in newest.items() if one[1]}
        _wait(page, lambda: _newest(page, "top-requests") == newest, _tables)
        _wait(page, lambda: _newest(page, "top-refused") == refused, _tables)
        refusals = sum(hits - 5 for hits in HITS.values() if hits > 5)
        said = page.text_content("#top-refused-bound") or ""
        assert re.fullmatch(
            rf"Last \d+ s: {refusals} refusals in all\. Every count is exact\.", said
        )
        _shoot(page, tmp_path / "dashboard_workers.png", full_page=True)
        with fresh(served.url) as http:  # what the store holds, as /v1/peek finds it
            for key, (remaining, _) in newest.items():
                look = http.post("/v1/peek", json=_check_of(domain, key))
                assert look.json()["statuses"][0]["remaining"] == remaining, key
        assert errors == [], errors
    finally:
        assert served.stop() == 0


def _check_of(domain: str, key: str) -> dict[str, object]:
    name, _, value = key.partition(":")
    return {"domain": domain, "descriptors": [{"entries": [{"key": name, "value": value}]}]}


def _newest(page: Page, table: str) -> dict[str, tuple[int, bool]]:
    """Each key a table of keys shows: the hits its newest decision left, and whether that
    decision refused."""
    shown = {}
    for row in page.query_selector_all(f"#{table} tbody tr"):
        key, remaining = row.query_selector("td.key"), row.query_selector("td.remaining")
        if key is not None and remaining is not None:
            left = (remaining.text_content() or "").replace(",", "")
            refused = "refused-now" in (row.get_attribute("class") or "")
            shown[key.text_content() or ""] = (int(left) if left.isdigit() else -1, refused)
    return shown


def _tables(page: Page) -> str:
    return f"requests {_newest(page, 'top-requests')}, refused {_newest(page, 'top-refused')}"


def _check_auth(url: str) -> None:
    """The page and its figures: 401 without the token, 200 with it."""
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, timeout=5) as client:
        page = client.get("/dashboard")
        assert page.status_code == 401
        assert page.headers["content-type"].startswith("text/html")
        assert client.get("/v1/stats").status_code == 401
        assert client.get("/v1/stats", headers={"Authorization": "Bearer wrong"}).status_code == 401
        stats = client.get("/v1/stats", headers=bearer)
        assert stats.status_code == 200
        assert stats.json()["tree"][0]["domain"] == "api"
        assert client.get("/dashboard", headers=bearer).status_code == 200
        assert client.get("/v1/top?window=300&n=10", headers=bearer).status_code == 200


def _errors_of(page: Page) -> list[str]:
    """The page's errors as they come: its uncaught exceptions, and the console's errors
    (a Content-Security-Policy violation among them)."""
    errors: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def _rate(page: Page, name: str) -> float:
    """The big figure ``#rate-<name>``: decisions a second over the last 5 complete seconds."""
    text = page.text_content(f"#rate-{name}") or ""
    try:
        return float(text)
    except ValueError:
        return 0.0


def _first_key(page: Page, table: str) -> str:
    cell = page.query_selector(f"#{table} tbody tr:first-child td.key")
    return "" if cell is None else cell.text_content() or ""


def _wait(
    page: Page,
    check: Callable[[], bool],
    shown: Callable[[Page], str] | None = None,
    timeout: float = 15,
) -> None:
    """Poll ``check()`` while the page runs, until it is true or ``timeout`` seconds pass;
    ``shown(page)`` says what the page showed instead."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            if shown is not None:
                raise TimeoutError(f"the page did not show it in {timeout} s: {shown(page)}")
            raise TimeoutError(
                f"the page did not show it in {timeout} s: allowed {_rate(page, 'allowed')}, "
                f"refused {_rate(page, 'refused')}, first refused key "
                f"{_first_key(page, 'top-refused')!r}"
            )
        page.wait_for_timeout(250)


def _shoot(page: Page, path: Path, *, full_page: bool) -> None:
    """A screenshot to ``path``, copied to ``$RATEKEEPER_SCREENSHOTS`` when it is set."""
    page.screenshot(path=path, full_page=full_page)
    copies = os.environ.get("RATEKEEPER_SCREENSHOTS")
    if copies:
        Path(copies).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(copies) / path.name)


def _shoot_phone(browser: Browser, url: str, path: Path) -> None:
    """The first screen on a phone, signed in by the address with the token."""
    phone = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True)
    try:
        page = phone.new_page()
        page.goto(f"{url}/dashboard?token={TOKEN}")
        assert page.url == f"{url}/dashboard"
        page.wait_for_selector("#top-refused td.key")
        page.wait_for_timeout(1200)  # a whole second drawn
        _shoot(page, path, full_page=False)
    finally:
        phone.close()
