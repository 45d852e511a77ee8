"""Names that were renamed still work, for a while: each old spelling gives the same object as
its new name, warns with a ``DeprecationWarning`` that names the new one and the version that
removes the old, and is listed in CHANGELOG.md's "Renamed" section. ratekeeper itself, its
tests and its benchmarks never use an old name."""

from __future__ import annotations

import ast
import asyncio
import importlib
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ratekeeper import AsyncEngine, AsyncMemoryStore
from ratekeeper.core.moved import REMOVED_IN, keywords_renamed, renamed_message

ROOT = Path(__file__).resolve().parents[1]

#: Each old name of a module's attribute: its new name, in the same module.
NAMES: dict[str, str] = {
    "ratekeeper.web.Outcome": "ratekeeper.web.GateDecision",
    "ratekeeper.web.Result": "ratekeeper.web.HandlerResult",
    "ratekeeper.core.store_keys.VERSION": "ratekeeper.core.store_keys.KEY_LAYOUT",
    "ratekeeper.service.runtime.settings.Address": (
        "ratekeeper.service.runtime.settings.ListenAddress"
    ),
}


#: Each old keyword argument: its new name, and the functions that take both.
KEYWORDS: dict[str, tuple[str, list[str]]] = {
    "admission": (
        "in_flight_bound",
        [
            "ratekeeper.service.runtime.app.create_app",
            "ratekeeper.service.http.http_app",
            "ratekeeper.service.grpc.serve_grpc",
            "ratekeeper.service.grpc.RateLimitServicer",
        ],
    ),
}

#: Each old attribute of a class: its new name.
ATTRIBUTES: dict[str, str] = {
    "ratekeeper.service.observe.metrics.Metrics.admission": (
        "ratekeeper.service.observe.metrics.Metrics.in_flight_bound"
    ),
    "ratekeeper.service.grpc.RateLimitServicer.admission": (
        "ratekeeper.service.grpc.RateLimitServicer.in_flight_bound"
    ),
}


def _split(dotted: str) -> tuple[str, str]:
    module, _, name = dotted.rpartition(".")
    return module, name


@pytest.mark.parametrize("old", NAMES)
def test_an_old_name_warns_and_gives_the_object_of_the_new_one(old: str) -> None:
    module_name, name = _split(old)
    module = importlib.import_module(module_name)
    with pytest.warns(DeprecationWarning) as warned:
        found = getattr(module, name)
    assert [str(warning.message) for warning in warned] == [renamed_message(old, NAMES[old])]
    assert warned[0].filename == __file__  # the line that used the old name
    assert found is getattr(module, _split(NAMES[old])[1])
    with pytest.warns(DeprecationWarning):  # every use warns, not only the first
        assert getattr(module, name) is found
    assert name not in getattr(module, "__all__", ())


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import ratekeeper.web

    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        ratekeeper.web.Nothing  # noqa: B018


def test_python_shows_the_warning_at_the_users_import_by_default(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from ratekeeper.web import Outcome"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == (
        "<string>:1: DeprecationWarning: "
        + renamed_message("ratekeeper.web.Outcome", "ratekeeper.web.GateDecision")
        + "\n"
    )


def test_the_message_names_the_new_spelling_and_the_version_that_removes_the_old() -> None:
    assert renamed_message("ratekeeper.web.Outcome", "ratekeeper.web.GateDecision") == (
        "ratekeeper.web.Outcome is deprecated and will be removed in 0.3.0: "
        "use ratekeeper.web.GateDecision"
    )


def _engine() -> AsyncEngine:
    return AsyncEngine(AsyncMemoryStore())


def test_create_app_takes_admission_for_in_flight_bound_and_warns() -> None:
    from ratekeeper.service.inflight import InFlightBound
    from ratekeeper.service.observe.metrics import Metrics
    from ratekeeper.service.runtime.app import create_app

    metrics, bound = Metrics(), InFlightBound(2)
    with pytest.warns(DeprecationWarning) as warned:
        create_app(_engine(), metrics=metrics, admission=bound)
    assert [str(warning.message) for warning in warned] == [
        renamed_message("create_app(admission=...)", "create_app(in_flight_bound=...)")
    ]
    assert warned[0].filename == __file__
    assert metrics.in_flight_bound is bound


def test_http_app_takes_admission_for_in_flight_bound_and_sheds_past_it() -> None:
    from ratekeeper.service.http import http_app
    from ratekeeper.service.inflight import InFlightBound

    bound = InFlightBound(1)
    assert bound.enter("http")  # the one decision in flight: the next is shed
    with pytest.warns(DeprecationWarning, match=r"http_app\(admission=\.\.\.\)") as warned:
        app = http_app(_engine(), admission=bound)
    assert warned[0].filename == __file__

    async def check() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rk") as client:
            return await client.post("/v1/check", json={"key": "k", "limit": "5/minute"})

    assert asyncio.run(check()).status_code == 503
    assert bound.shed["http"] == 1


def test_serve_grpc_and_its_servicer_take_admission_for_in_flight_bound() -> None:
    from ratekeeper.service.grpc import RateLimitServicer, serve_grpc
    from ratekeeper.service.inflight import InFlightBound

    bound = InFlightBound(1)
    with pytest.warns(DeprecationWarning, match=r"RateLimitServicer\(admission=") as warned:
        servicer = RateLimitServicer(_engine(), admission=bound)
    assert warned[0].filename == __file__
    assert servicer.in_flight_bound is bound

    async def serve() -> None:
        with pytest.warns(DeprecationWarning, match=r"serve_grpc\(admission=") as warned:
            server, port = await serve_grpc(_engine(), "127.0.0.1:0", admission=bound)
        assert warned[0].filename == __file__
        assert port > 0
        await server.stop(None)

    asyncio.run(serve())


def test_a_renamed_keyword_and_its_new_name_at_once_are_refused() -> None:
    @keywords_renamed("f", {"old": "new"})
    def f(*, new: int = 0) -> int:
        return new

    @keywords_renamed("g", {"old": "new"})
    async def g(*, new: int = 0) -> int:
        return new

    assert f(new=1) == 1 and asyncio.run(g(new=2)) == 2
    with pytest.warns(DeprecationWarning, match=r"^f\(old=\.\.\.\) is deprecated"):
        assert f(old=3) == 3
    with pytest.warns(DeprecationWarning, match=r"^g\(old=\.\.\.\) is deprecated"):
        assert asyncio.run(g(old=4)) == 4
    with pytest.raises(TypeError, match="new= or old=, not both"):
        f(old=1, new=2)
    assert asyncio.iscoroutinefunction(g)


def test_metrics_admission_is_in_flight_bound_with_a_warning() -> None:
    from ratekeeper.service.inflight import InFlightBound
    from ratekeeper.service.observe.metrics import Metrics

    metrics, bound = Metrics(), InFlightBound(3)
    old, new = "Metrics.admission", "Metrics.in_flight_bound"
    with pytest.warns(DeprecationWarning) as warned:
        metrics.admission = bound
    assert [str(warning.message) for warning in warned] == [renamed_message(old, new)]
    assert warned[0].filename == __file__
    assert metrics.in_flight_bound is bound
    with pytest.warns(DeprecationWarning, match=r"Metrics\.admission"):
        assert metrics.admission is bound


def test_the_servicers_admission_is_its_in_flight_bound_with_a_warning() -> None:
    from ratekeeper.service.grpc import RateLimitServicer
    from ratekeeper.service.inflight import InFlightBound

    bound = InFlightBound(3)
    servicer = RateLimitServicer(_engine(), None, bound)
    old, new = "RateLimitServicer.admission", "RateLimitServicer.in_flight_bound"
    with pytest.warns(DeprecationWarning) as warned:
        assert servicer.admission is bound
    assert [str(warning.message) for warning in warned] == [renamed_message(old, new)]
    assert warned[0].filename == __file__


def renamed_section() -> str:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    section = changelog[changelog.index("### Renamed") :]
    return section[: section.index("\n### ", 1)]


def test_the_changelog_lists_every_renamed_name_and_when_it_goes() -> None:
    section = renamed_section()
    assert f"removed in {REMOVED_IN}" in section
    for old, new in (NAMES | ATTRIBUTES).items():
        line = f"- `{old}` → `{new}`"
        assert line in section, line
    for old, (new, functions) in KEYWORDS.items():
        line = f"- `{old}=` → `{new}=`"
        assert line in section, line
        for function in functions:
            assert f"`{function.rpartition('.')[2]}`" in section, function


def _keywords(path: Path) -> set[str]:
    """The old keywords ``path`` passes to a call."""
    return {
        keyword.arg
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg in KEYWORDS
    }


def _uses(path: Path) -> set[str]:
    """The old names ``path`` imports (``from ratekeeper.web import Outcome``) or reads from a
    module it imported (``ratekeeper.web.Outcome``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Attribute):
            found.add(ast.unparse(node))
    return found & NAMES.keys()


def test_ratekeeper_its_tests_and_benchmarks_never_use_an_old_name() -> None:
    users = {
        str(path.relative_to(ROOT)): sorted(_uses(path) | _keywords(path))
        for folder in ("src", "benchmarks", "tests", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if path != Path(__file__)
    }
    assert {path: olds for path, olds in users.items() if olds} == {}


def test_the_scripts_python_never_uses_an_old_name(tmp_path: Path) -> None:
    """The Python the shell scripts run (``<<'PY' ... PY``) is held to the same: a warning
    there is hidden by the script, and the name's removal would break it without a word."""
    heredoc = re.compile(r"<<'PY'[^\n]*\n(.*?)\nPY\n", re.DOTALL)
    users = {}
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        for index, code in enumerate(heredoc.findall(script.read_text(encoding="utf-8"))):
            path = tmp_path / f"{script.stem}-{index}.py"
            path.write_text(code, encoding="utf-8")
            users[f"{script.name} #{index}"] = sorted(_uses(path) | _keywords(path))
    assert users, "no script runs Python: the heredoc's marker changed"
    assert {name: olds for name, olds in users.items() if olds} == {}
