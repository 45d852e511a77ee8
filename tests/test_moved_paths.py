"""Import paths that moved still import, for a while: each old module gives the same objects as
its new home, warns once with a ``DeprecationWarning`` naming the new path and the version that
removes it, and is listed in CHANGELOG.md. ratekeeper itself never imports an old path."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper.core.moved import REMOVED_IN, message

ROOT = Path(__file__).resolve().parents[1]

#: Each old path: its new home(s), each with the names the old module held that live there now.
MOVED: dict[str, dict[str, list[str]]] = {
    "ratekeeper.commands": {
        "ratekeeper.cli.commands": ["LOOKUPS", "config_url", "limits", "one_line", "validate"]
    },
    "ratekeeper.core.keys": {
        "ratekeeper.core.store_keys": [
            "MAX_IDENTITY",
            "TAGS",
            "VERSION",
            "bounded",
            "check_prefix",
            "check_tag",
            "descriptor_entries",
            "descriptor_key",
            "escape",
            "identity",
            "limit_tag",
            "state_key",
        ]
    },
    "ratekeeper.decision": {"ratekeeper.core.decisions": ["Decision", "allow", "deny"]},
    "ratekeeper.engine.core": {"ratekeeper.engine": ["AsyncEngine", "Engine"]},
    "ratekeeper.errors": {
        "ratekeeper.core.errors": [
            "ConfigError",
            "ConfigStoreError",
            "InvalidInputError",
            "InvalidLimitError",
            "MissingExtraError",
            "RateLimitExceeded",
            "RatekeeperError",
            "StoreConfigError",
            "StoreError",
            "TraceError",
        ]
    },
    "ratekeeper.inputs": {
        "ratekeeper.core.inputs": [
            "MAX_COST",
            "check_cost",
            "check_hit",
            "check_hits",
            "check_key",
            "check_now",
            "check_text",
            "decimal",
        ]
    },
    "ratekeeper.keys": {
        "ratekeeper.core.store_keys": [
            "MAX_IDENTITY",
            "TAGS",
            "VERSION",
            "bounded",
            "check_prefix",
            "check_tag",
            "descriptor_entries",
            "descriptor_key",
            "escape",
            "identity",
            "limit_tag",
            "state_key",
        ]
    },
    "ratekeeper.limit": {
        "ratekeeper.core.limits": [
            "CALENDAR_PERIODS",
            "Limit",
            "MAX_AMOUNT",
            "MAX_BUCKETS",
            "MAX_PERIOD",
            "MIN_PERIOD",
            "algorithm_of",
        ]
    },
    "ratekeeper.overrides": {
        "ratekeeper.core.overrides": ["DEFAULT_ALGORITHM", "FIELDS", "Override"]
    },
    "ratekeeper.rates": {
        "ratekeeper.core.rates": ["cached", "parse", "parse_many"],
        "ratekeeper.core.periods": ["parse_period"],
    },
    "ratekeeper.redaction": {"ratekeeper.core.redaction": ["redacted"]},
    "ratekeeper.service.admission": {
        "ratekeeper.service.inflight": [
            "DEFAULT_MAX_IN_FLIGHT",
            "MOST_IN_FLIGHT",
            "QUIET",
            "RETRY_AFTER",
            "Admission",
            "check_limit",
        ]
    },
    "ratekeeper.service.app": {
        "ratekeeper.service.runtime.app": [
            "Parts",
            "build_app",
            "build_engine",
            "build_parts",
            "envoy_header_names",
            "from_environment",
            "require_server_extra",
            "run_config",
        ],
        "ratekeeper.service.runtime.serve": ["GRACE", "serve", "uvicorn_options"],
    },
    "ratekeeper.service.grpc_asgi": {
        "ratekeeper.service.grpc.asgi": [
            "CHECK",
            "MAX_MESSAGE",
            "SHOULD_RATE_LIMIT",
            "WATCH",
            "Aborted",
            "Context",
            "GrpcApp",
            "frame",
            "read_message",
            "timeout_of",
            "trailers",
        ],
        "ratekeeper.service.asgi": ["Receive", "Scope", "Send"],
    },
    "ratekeeper.service.metrics": {
        "ratekeeper.service.observe.metrics": [
            "ALLOWED",
            "CONTENT_TYPE",
            "DEGRADED",
            "LATENCY_BUCKETS",
            "LIMITED",
            "OTHER",
            "SHADOWED",
            "UNKNOWN",
            "Metrics",
        ],
        "ratekeeper.service.observe.exposition": ["MetricsApp"],
        "ratekeeper.service.surfaces": ["SURFACES"],
        "ratekeeper.service.asgi": ["Receive", "Scope", "Send"],
    },
    "ratekeeper.service.pyvoy_app": {
        "ratekeeper.service.runtime.pyvoy_app": ["build", "grpc_or_http", "is_grpc"],
        "ratekeeper.service.asgi": ["App"],
    },
    "ratekeeper.service.settings": {
        "ratekeeper.service.runtime.settings": [
            "EXAMPLE_RULES",
            "IN_MEMORY_CONFIG",
            "Address",
            "Settings",
            "add_arguments",
        ],
        "ratekeeper.service.runtime.values": [
            "CONFIG_SCHEMES",
            "ENVOY_HEADER_NAMES",
            "LOG_FORMATS",
            "LOG_LEVELS",
            "MAX_PLAN_CACHE_SIZE",
            "MAX_WORKERS",
            "POLICIES",
            "SERVERS",
            "STORE_SCHEMES",
        ],
    },
    "ratekeeper.service.translate": {
        "ratekeeper.wire.translate": [
            "MAX_REMAINING",
            "UNIT_OF_PERIOD",
            "Answer",
            "Call",
            "Fields",
            "WireDescriptor",
            "answer",
            "arguments",
            "costs",
            "decide",
            "decide_async",
            "descriptors",
            "fields",
            "headers_to_add",
            "sent_limit",
        ],
        "ratekeeper.wire.statuses": ["OK", "OVER_LIMIT", "Limited", "WireStatus"],
    },
    "ratekeeper.simulate.traces": {
        "ratekeeper.simulate.generators": [
            "MAX_EVENTS",
            "START",
            "bursts",
            "diurnal",
            "poisson",
            "retry_storm",
            "window_edge",
            "zipf",
        ]
    },
    "ratekeeper.stores.leasing": {
        "ratekeeper.stores.wrappers.leasing": [
            "HORIZON",
            "SHARE",
            "TTL",
            "AsyncLeasing",
            "Leasing",
            "check_options",
        ]
    },
    "ratekeeper.stores.lua": {
        "ratekeeper.stores.redis.scripts": [
            "BATCH_HEADER",
            "DECISION",
            "REFUND",
            "REFUND_HEADER",
            "RELEASE",
            "SINGLE",
            "SOURCE",
            "arguments",
            "batch_source",
            "decision",
            "decisions",
            "decisions_at",
            "limit_args",
            "now_arg",
            "released",
        ]
    },
    "ratekeeper.stores.resilience": {
        "ratekeeper.stores.wrappers.resilience": [
            "POLICIES",
            "AsyncResilient",
            "Resilient",
            "check_instances",
        ]
    },
    "ratekeeper.stores.urls": {
        "ratekeeper.stores.redis.clients": [
            "DEFAULT_TIMEOUT",
            "check_url",
            "open_client",
            "split_timeout",
        ]
    },
}


#: Names an old module still gives under the name they had, renamed in their new home since
#: (tests/test_renamed.py): the new name.
RENAMED_AT_HOME: dict[tuple[str, str], str] = {
    ("ratekeeper.core.store_keys", "VERSION"): "KEY_LAYOUT",
    ("ratekeeper.service.runtime.settings", "Address"): "ListenAddress",
    ("ratekeeper.service.inflight", "Admission"): "InFlightBound",
}


#: Each name that moved out of a module that stays: its new home.
MOVED_NAMES: dict[str, str] = {
    "ratekeeper.service.http.create_app": "ratekeeper.service.runtime.app.create_app",
}


def new_path(old: str) -> str:
    return " and ".join(MOVED[old])


@pytest.mark.parametrize("old", MOVED)
def test_an_old_path_warns_and_gives_the_objects_of_the_new_one(
    old: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported afresh, so it warns again
    with pytest.warns(DeprecationWarning) as warned:
        __import__(old)  # as an import statement does, with no frame of importlib's between
    module = sys.modules[old]
    assert [str(warning.message) for warning in warned] == [message(old, new_path(old))]
    assert warned[0].filename == __file__  # the importing line, past the import machinery
    names = [name for names in MOVED[old].values() for name in names]
    assert sorted(module.__all__) == sorted(names)
    for new, moved_names in MOVED[old].items():
        home = importlib.import_module(new)
        for name in moved_names:
            now = RENAMED_AT_HOME.get((new, name), name)
            assert getattr(module, name) is getattr(home, now), f"{old}.{name}"


@pytest.mark.parametrize("old", MOVED_NAMES)
def test_an_old_name_warns_and_gives_the_object_of_the_new_one(
    old: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module_name, _, name = old.rpartition(".")
    module = importlib.import_module(module_name)
    monkeypatch.delitem(vars(module), name, raising=False)  # looked up afresh, so it warns again
    with pytest.warns(DeprecationWarning) as warned:
        found = getattr(module, name)
    assert [str(warning.message) for warning in warned] == [message(old, MOVED_NAMES[old])]
    assert warned[0].filename == __file__  # the line that asked for it
    home, _, new_name = MOVED_NAMES[old].rpartition(".")
    assert found is getattr(importlib.import_module(home), new_name)


def test_the_message_names_the_new_path_and_the_version_that_removes_the_old() -> None:
    assert REMOVED_IN == "0.3.0"
    assert message("ratekeeper.overrides", "ratekeeper.core.overrides") == (
        "ratekeeper.overrides is deprecated and will be removed in 0.3.0: "
        "import from ratekeeper.core.overrides"
    )


def test_python_shows_the_warning_at_the_users_import_by_default(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from ratekeeper.overrides import Override"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == (
        "<string>:1: DeprecationWarning: "
        + message("ratekeeper.overrides", "ratekeeper.core.overrides")
        + "\n"
    )


def test_the_changelog_lists_every_moved_path_and_when_it_goes() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    section = changelog[changelog.index("### Moved import paths") :]
    section = section[: section.index("\n### ", 1)]
    assert f"removed in {REMOVED_IN}" in section
    for old, homes in MOVED.items():
        line = f"- `{old}` → " + ", ".join(f"`{new}`" for new in homes)
        assert line in section, line
    for old, new in MOVED_NAMES.items():
        line = f"- `{old}` → `{new}`"
        assert line in section, line


def _imported(path: Path) -> set[str]:
    """The modules ``path`` imports, and the modules its ``from ... import`` lines import from
    (with each name joined on, as it may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_ratekeeper_its_tests_and_benchmarks_never_import_an_old_path() -> None:
    old_files = {ROOT / "src" / f"{old.replace('.', '/')}.py" for old in MOVED}
    users = {
        str(path.relative_to(ROOT)): sorted(_imported(path) & (MOVED.keys() | MOVED_NAMES.keys()))
        for folder in ("src", "benchmarks", "tests", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if path not in old_files and path != Path(__file__)
    }
    assert {path: olds for path, olds in users.items() if olds} == {}
