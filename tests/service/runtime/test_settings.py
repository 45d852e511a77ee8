"""The service's settings: flags over ``RATEKEEPER_*`` variables over defaults, each checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratekeeper.core.errors import ConfigError
from ratekeeper.service.runtime.settings import EXAMPLE_RULES, ListenAddress, Settings
from tests.service.runtime.command_line import read

TOKEN = "s3cret-token-0123456789"


def test_the_defaults() -> None:
    settings = read([])
    assert settings == Settings()
    assert settings.store == "memory://"
    assert settings.config == "sqlite:///ratekeeper.db"
    assert settings.rules == (EXAMPLE_RULES,)
    assert Path(EXAMPLE_RULES).is_file()
    assert settings.http == ListenAddress("127.0.0.1", 8080)
    assert settings.grpc == ListenAddress("127.0.0.1", 8081)
    assert settings.admin_token is None
    assert (settings.on_store_error, settings.log_format, settings.workers) == ("local", "text", 1)
    assert settings.instances is None  # counted through the store


def test_flags_win_over_the_environment(tmp_path: Path) -> None:
    one, two = tmp_path / "a.yaml", tmp_path / "b.yaml"
    one.write_text("domain: a\n")
    two.write_text("domain: b\n")
    environ = {
        "RATEKEEPER_STORE": "redis://127.0.0.1:1/0",
        "RATEKEEPER_HTTP": "0.0.0.0:9000",
        "RATEKEEPER_RULES": f"{one}:{two}",
        "RATEKEEPER_ADMIN_TOKEN": TOKEN,
        "RATEKEEPER_WORKERS": "4",
        "RATEKEEPER_LOG_FORMAT": "json",
    }
    settings = read(["--http", "[::1]:9001", "--on-store-error", "deny"], environ)
    assert settings.store == "redis://127.0.0.1:1/0"
    assert settings.http == ListenAddress("::1", 9001)
    assert str(settings.http) == "[::1]:9001"
    assert settings.rules == (str(one), str(two))
    assert settings.admin_token == TOKEN
    assert TOKEN not in repr(settings)
    assert (settings.on_store_error, settings.log_format, settings.workers) == ("deny", "json", 4)
    assert read(["--rules", str(two)], environ).rules == (str(two),)


def test_every_bad_value_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        read(
            [
                "--store",
                "mongodb://x",
                "--config",
                "mysql://u:pw@h/db",
                "--rules",
                "/no/such/rules.yaml",
                "--http",
                "localhost",
                "--grpc",
                "127.0.0.1:70000",
                "--admin-token",
                "short",
                "--on-store-error",
                "ignore",
                "--log-format",
                "xml",
                "--workers",
                "0",
            ]
        )
    errors = caught.value.errors
    assert [error.split(":")[0] for error in errors] == [
        "--store",
        "--config",
        "--rules",
        "--http",
        "--grpc",
        "--admin-token",
        "--on-store-error",
        "--log-format",
        "--workers",
    ]
    assert "pw" not in str(caught.value)
    assert "expected one of allow, deny, local, not 'ignore'" in errors[6]


def test_a_bad_variable_is_named_with_its_flag() -> None:
    with pytest.raises(ConfigError, match=r"--workers \(from \$RATEKEEPER_WORKERS\): expected"):
        read([], {"RATEKEEPER_WORKERS": "many"})


@pytest.mark.parametrize(("flag", "value"), [("--workers", "²"), ("--http", "127.0.0.1:²")])
def test_a_number_not_written_in_0_to_9_is_refused_with_its_flag(flag: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{flag}: expected"):
        read([flag, value])


def test_many_workers_need_a_shared_store() -> None:
    with pytest.raises(ConfigError, match="each worker would count alone"):
        read(["--workers", "2"])
    assert read(["--workers", "2", "--store", "redis://127.0.0.1:6379"]).workers == 2


def test_ietf_headers_from_the_flag_or_the_variable() -> None:
    assert read([]).ietf_headers is False
    assert read(["--ietf-headers"]).ietf_headers is True
    for value, expected in (
        ("true", True),
        ("1", True),
        ("ON", True),
        ("false", False),
        ("", False),
    ):
        assert read([], {"RATEKEEPER_IETF_HEADERS": value}).ietf_headers is expected
    assert read(["--ietf-headers"], {"RATEKEEPER_IETF_HEADERS": "false"}).ietf_headers is True
    with pytest.raises(ConfigError, match=r"--ietf-headers \(from \$RATEKEEPER_IETF_HEADERS\)"):
        read([], {"RATEKEEPER_IETF_HEADERS": "sometimes"})


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "nan", "inf", "two", ""])
def test_instances_must_be_a_whole_number_of_at_least_one(bad: str) -> None:
    with pytest.raises(
        ConfigError, match=r"--instances: expected auto or a whole number of at least 1"
    ):
        read(["--instances", bad])
    with pytest.raises(ConfigError, match=r"--instances \(from \$RATEKEEPER_INSTANCES\)"):
        read([], {"RATEKEEPER_INSTANCES": bad})


def test_each_worker_of_each_instance_holds_its_share_of_the_local_fallback() -> None:
    from ratekeeper.service.runtime.app import build_engine

    settings = read(["--store", "redis://127.0.0.1:1/0", "--instances", "3", "--workers", "2"])
    assert (settings.on_store_error, settings.instances) == ("local", 3)
    engine = build_engine(settings)
    policy = engine.store.policy  # type: ignore[attr-defined]
    assert (policy.on_store_error, policy.instances) == ("local", 6)
    assert engine.store.fleet is None  # type: ignore[attr-defined]  # configured: not counted


@pytest.mark.parametrize("flags", [[], ["--instances", "auto"], ["--instances", " AUTO "]])
def test_without_instances_the_processes_count_themselves(flags: list[str]) -> None:
    from ratekeeper.service.runtime.app import build_engine

    settings = read(["--store", "redis://127.0.0.1:1/0", "--workers", "2", *flags])
    assert settings.instances is None
    engine = build_engine(settings)
    store = engine.store
    assert store.fleet is not None  # type: ignore[attr-defined]  # the lifespan runs its calls
    assert store.policy.fleet.source == "unknown"  # type: ignore[attr-defined]


def test_quota_mode_and_dynamic_metadata_reach_the_engine_and_the_answers() -> None:
    from ratekeeper.service.runtime.app import build_engine, build_parts
    from tests.service.asgi import AppClient

    assert build_engine(read([])).quota_mode is False
    assert build_engine(read(["--quota-mode"])).quota_mode is True
    body = {"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}
    for flags, expected in (
        ([], None),
        (["--dynamic-metadata"], {"domain": "d", "descriptors": [{"entries": ["k=v"]}]}),
    ):
        parts = build_parts(read([*flags, "--config", "sqlite://:memory:"]), grpc_aio=False)
        with AppClient(parts.http) as client:
            assert client.post("/json", json=body).json().get("dynamicMetadata") == expected


def test_the_production_switches_from_flags_or_variables() -> None:
    defaults = read([])
    assert (defaults.log_level, defaults.access_log, defaults.shadow_mode) == ("info", False, False)
    assert (defaults.debt, defaults.envoy_headers) == (False, False)
    assert defaults.envoy_header_names == (
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    )
    flags = read(["--access-log", "--shadow-mode", "--debt", "--envoy-headers"])
    assert (flags.access_log, flags.shadow_mode, flags.debt, flags.envoy_headers) == (
        True,
        True,
        True,
        True,
    )
    variables = read(
        [],
        {
            "RATEKEEPER_ACCESS_LOG": "yes",
            "RATEKEEPER_SHADOW_MODE": "1",
            "RATEKEEPER_DEBT": "true",
            "RATEKEEPER_ENVOY_HEADERS": "on",
        },
    )
    assert (variables.access_log, variables.shadow_mode, variables.debt) == (True, True, True)
    assert variables.envoy_headers is True


@pytest.mark.parametrize(
    ("given", "level"),
    [
        ("debug", "debug"),
        ("INFO", "info"),
        ("WARN", "warning"),
        ("Warning", "warning"),
        ("error", "error"),
        ("trace", "debug"),
        ("fatal", "error"),
    ],
)
def test_log_levels_take_the_usual_spellings(given: str, level: str) -> None:
    assert read(["--log-level", given]).log_level == level
    assert read([], {"RATEKEEPER_LOG_LEVEL": given}).log_level == level


@pytest.mark.parametrize("bad", ["", "loud", "10", "info,debug"])
def test_a_bad_log_level_is_refused_by_name(bad: str) -> None:
    with pytest.raises(ConfigError, match="--log-level"):
        read(["--log-level", bad])


def test_envoy_header_names() -> None:
    names = read(["--envoy-header-names", "RateLimit-Limit, RateLimit-Remaining,RateLimit-Reset"])
    assert names.envoy_header_names == ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")


@pytest.mark.parametrize(
    "bad",
    ["A,B", "A,B,C,D", "A,,C", "A B,C,D", "A,a,C", "X:Y,B,C", "A,B,C\r\nX: y", "A,retry-after,C"],
)
def test_bad_envoy_header_names_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="--envoy-header-names"):
        read(["--envoy-header-names", bad])


@pytest.mark.parametrize("bad", ["maybe", "2", "nan"])
def test_a_switch_that_is_neither_true_nor_false_is_refused(bad: str) -> None:
    for name in (
        "ACCESS_LOG",
        "SHADOW_MODE",
        "DEBT",
        "ENVOY_HEADERS",
        "LOG_KEYS",
        "DYNAMIC_METADATA",
        "QUOTA_MODE",
        "HEALTHCHECK_STORE",
        "HEALTHCHECK_RULES",
    ):
        with pytest.raises(ConfigError, match=f"RATEKEEPER_{name}"):
            read([], {f"RATEKEEPER_{name}": bad})


def test_the_workers_read_back_every_setting_serve_was_given(tmp_path: Path) -> None:
    from ratekeeper.service.runtime.serve import _environment

    given = read(
        [
            "--store",
            "redis://127.0.0.1:6379/0",
            "--workers",
            "2",
            "--log-level",
            "warning",
            "--access-log",
            "--shadow-mode",
            "--debt",
            "--envoy-headers",
            "--envoy-header-names",
            "A-Limit,A-Remaining,A-Reset",
            "--max-in-flight",
            "7",
            "--admin-token",
            TOKEN,
            "--log-format",
            "json",
            "--dashboard",
            "--log-keys",
            "--log-libraries",
            "grpc, redis.asyncio",
            "--dynamic-metadata",
            "--quota-mode",
            "--healthcheck-store",
            "--healthcheck-rules",
        ]
    )
    assert (given.log_keys, given.log_libraries) == (True, ("grpc", "redis.asyncio"))
    assert (given.dynamic_metadata, given.quota_mode) == (True, True)
    assert (given.healthcheck_store, given.healthcheck_rules) == (True, True)
    assert Settings.read(None, _environment(given)) == given


def test_the_libraries_logging_are_logger_names_or_all() -> None:
    assert read([], {}).log_libraries == ()
    assert read(["--log-libraries", "all"], {}).log_libraries == ("all",)
    environ = {"RATEKEEPER_LOG_LIBRARIES": "grpc,,grpc,httpx"}
    assert read([], environ).log_libraries == ("grpc", "httpx")
    for bad in ("grpc redis", "grpc;redis", ".grpc", "grpc."):
        with pytest.raises(ConfigError, match="--log-libraries: expected logger names"):
            read(["--log-libraries", bad], {})
    assert read([], {"RATEKEEPER_LOG_KEYS": "true"}).log_keys


def test_the_dashboard_is_off_by_default_and_needs_the_admin_token() -> None:
    assert read([]).dashboard is False
    assert read(["--dashboard", "--admin-token", TOKEN]).dashboard is True
    environ = {"RATEKEEPER_DASHBOARD": "true", "RATEKEEPER_ADMIN_TOKEN": TOKEN}
    assert read([], environ).dashboard is True
    with pytest.raises(ConfigError) as refused:
        read(["--dashboard"])
    assert "--dashboard: the dashboard needs --admin-token" in str(refused.value)
    with pytest.raises(ConfigError) as refused:  # a bad token: said once, of the token
        read(["--dashboard", "--admin-token", "short"])
    assert "--admin-token" in str(refused.value) and "--dashboard" not in str(refused.value)


def test_http_and_grpc_need_ports_of_their_own() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.read(
            None, {"RATEKEEPER_HTTP": "127.0.0.1:9000", "RATEKEEPER_GRPC": "0.0.0.0:9000"}
        )
    assert caught.value.errors == [
        "--http (from $RATEKEEPER_HTTP) and --grpc (from $RATEKEEPER_GRPC): HTTP "
        "(127.0.0.1:9000) and gRPC (0.0.0.0:9000) need ports of their own"
    ]
    assert (
        Settings.read(
            None, {"RATEKEEPER_HTTP": "127.0.0.1:9000", "RATEKEEPER_GRPC": "127.0.0.2:9000"}
        ).grpc.port
        == 9000
    )


def test_the_server_from_the_flag_or_the_variable() -> None:
    assert read([]).server == "uvicorn"
    assert read(["--server", "pyvoy"]).server == "pyvoy"
    assert read([], {"RATEKEEPER_SERVER": "pyvoy"}).server == "pyvoy"
    assert read(["--server", "uvicorn"], {"RATEKEEPER_SERVER": "pyvoy"}).server == "uvicorn"
    with pytest.raises(ConfigError, match=r"--server: expected one of uvicorn, pyvoy, not 'nginx'"):
        read(["--server", "nginx"])
    with pytest.raises(ConfigError, match=r"--server \(from \$RATEKEEPER_SERVER\): expected"):
        read([], {"RATEKEEPER_SERVER": ""})


def test_pyvoy_runs_one_worker() -> None:
    redis = ["--store", "redis://127.0.0.1:6379/0"]
    assert read(["--server", "pyvoy", "--workers", "1", *redis]).workers == 1
    with pytest.raises(
        ConfigError,
        match=r"--workers \(from \$RATEKEEPER_WORKERS\): --server pyvoy runs one process",
    ):
        read(["--server", "pyvoy", *redis], {"RATEKEEPER_WORKERS": "2"})


def test_instances_past_ten_thousand_are_a_typo() -> None:
    assert read(["--instances", "10000"]).instances == 10_000
    with pytest.raises(ConfigError, match=r"--instances: .* at most 10,000, not '10001'"):
        read(["--instances", "10001"])
    with pytest.raises(ConfigError, match=r"at most 10,000, not '99999999999999999999999'"):
        read([], {"RATEKEEPER_INSTANCES": "99999999999999999999999"})


def test_the_listen_host_moves_the_default_addresses_only(tmp_path: Path) -> None:
    anywhere = {"RATEKEEPER_LISTEN_HOST": "0.0.0.0"}
    settings = read([], anywhere)
    assert (settings.http, settings.grpc) == (
        ListenAddress("0.0.0.0", 8080),
        ListenAddress("0.0.0.0", 8081),
    )
    assert settings.sources["http"] == "--http (from $RATEKEEPER_LISTEN_HOST)"
    assert read([], {"RATEKEEPER_LISTEN_HOST": "::"}).grpc == ListenAddress("::", 8081)
    # Below a flag and a variable of ratekeeper's own, ...
    mine = read(["--http", "127.0.0.1:9000"], {**anywhere, "RATEKEEPER_GRPC": "127.0.0.1:9001"})
    assert (mine.http, mine.grpc) == (
        ListenAddress("127.0.0.1", 9000),
        ListenAddress("127.0.0.1", 9001),
    )
    # ... and below the reference's HOST and PORT, read with RUNTIME_ROOT set.
    runtime = tmp_path / "runtime"
    (runtime / "ratelimit" / "config").mkdir(parents=True)
    reference = {
        **anywhere,
        "RUNTIME_ROOT": str(runtime),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "HOST": "127.0.0.1",
        "PORT": "9080",
        "GRPC_PORT": "9081",
    }
    theirs = read([], reference)
    assert (theirs.http, theirs.grpc) == (
        ListenAddress("127.0.0.1", 9080),
        ListenAddress("0.0.0.0", 9081),
    )
    assert theirs.sources["http"] == "--http (from $HOST, $PORT)"
