"""Web frameworks are optional: importing ratekeeper, or its framework-free web parts, imports
none of them."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("starlette", "fastapi", "flask", "werkzeug", "django", "uvicorn", "waitress", "httpx")


def imported_after(statement: str) -> list[str]:
    code = (
        f"import sys; {statement}; "
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r}))))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    return found.split(",") if found else []


def test_importing_ratekeeper_imports_no_web_framework() -> None:
    assert imported_after("import ratekeeper") == []


def test_the_middleware_imports_no_web_framework() -> None:
    statement = "import ratekeeper.web, ratekeeper.web.asgi, ratekeeper.web.wsgi"
    assert imported_after(statement) == []


def test_each_framework_module_imports_only_its_own() -> None:
    assert "fastapi" in imported_after("import ratekeeper.web.fastapi")
    assert "django" not in imported_after("import ratekeeper.web.flask")
    assert "flask" not in imported_after("import ratekeeper.web.django")


def test_the_web_surface_is_what_its_all_says() -> None:
    import ratekeeper.web

    assert ratekeeper.web.__all__ == sorted(ratekeeper.web.__all__)
    assert ratekeeper.web.__all__ == [
        "AsyncGate",
        "Gate",
        "GateDecision",
        "HandlerResult",
        "Key",
        "RateLimit",
        "Replies",
        "Reply",
        "Request",
        "keys",
    ]
