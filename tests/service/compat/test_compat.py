"""envoyproxy/ratelimit's settings read by ``ratekeeper serve``: every variable honoured,
checked or ignored, as ``Settings.read`` sees them (no server runs here)."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter
from pathlib import Path

import pytest

from ratekeeper.core.errors import ConfigError
from ratekeeper.rules import load_rules
from ratekeeper.service.compat import translate
from ratekeeper.service.compat.variables import CHECKED, HONOURED, IGNORED, VARIABLES
from ratekeeper.service.runtime.settings import (
    EXAMPLE_RULES,
    ListenAddress,
    Settings,
)
from tests.service.runtime.command_line import read

DOCS = Path(__file__).resolve().parents[3] / "docs"

RULE = (
    "domain: rl\ndescriptors:\n  - key: foo\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
)


def errors_of(argv: list[str], environ: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        read(argv, environ)
    return caught.value.errors


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    """A runtime directory laid out as the reference's deployments lay it out:
    ``current`` a symlink to a version, holding ``ratelimit/config/*.yaml``."""
    config = tmp_path / "v1" / "ratelimit" / "config"
    config.mkdir(parents=True)
    (config / "rl.yaml").write_text(RULE)
    (tmp_path / "current").symlink_to(tmp_path / "v1")
    return tmp_path / "current"


@pytest.fixture
def reference(runtime: Path) -> dict[str, str]:
    """The variables of a typical deployment of the reference."""
    return {
        "RUNTIME_ROOT": str(runtime),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": "redis.internal:6379",
        "USE_STATSD": "false",
    }


def test_runtime_root_alone_reads_the_references_settings(
    reference: dict[str, str], runtime: Path
) -> None:
    settings = read([], reference)
    assert settings.compat == "envoy-ratelimit"
    assert settings.rules == (str(runtime / "ratelimit" / "config"),)
    assert settings.store == "redis://redis.internal:6379/0"
    # The reference's defaults where ratekeeper's differ: every address, its header names,
    # and its counting of every hit.
    assert settings.http == ListenAddress("0.0.0.0", 8080)
    assert settings.grpc == ListenAddress("0.0.0.0", 8081)
    assert settings.envoy_header_names == (
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
    )
    assert (settings.debt, settings.envoy_headers, settings.shadow_mode) == (True, False, False)
    assert (settings.log_level, settings.log_format, settings.merge_domains) == (
        "info",
        "text",
        False,
    )
    assert settings.notes[0] == (
        logging.WARNING,
        "reading envoyproxy/ratelimit's variables and runtime directory (RUNTIME_ROOT is set "
        "and neither --rules nor $RATEKEEPER_RULES is); the flags and RATEKEEPER_* variables "
        "win over them",
    )


def test_every_honoured_variable_reaches_its_setting(reference: dict[str, str]) -> None:
    settings = read(
        [],
        {
            **reference,
            "HOST": "127.0.0.1",
            "PORT": "9080",
            "GRPC_HOST": "::1",
            "GRPC_PORT": "9081",
            "LOG_LEVEL": "WARN",
            "LOG_FORMAT": "JSON",
            "SHADOW_MODE": "true",
            "QUOTA_MODE": "T",
            "RESPONSE_DYNAMIC_METADATA": "1",
            "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true",
            "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "TRUE",
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "True",
            "LIMIT_RESPONSE_HEADERS_ENABLED": "1",
            "LIMIT_LIMIT_HEADER": "X-Limit",
            "LIMIT_REMAINING_HEADER": "X-Left",
            "LIMIT_RESET_HEADER": "X-Reset",
            "MERGE_DOMAIN_CONFIG": "t",
            "REDIS_AUTH": "ratelimit:p@ss:word",
            "REDIS_TIMEOUT": "1m30s",
            "CACHE_KEY_PREFIX": "team-a:",
        },
    )
    assert settings.http == ListenAddress("127.0.0.1", 9080)
    assert str(settings.grpc) == "[::1]:9081"
    assert (settings.log_level, settings.log_format) == ("warning", "json")
    assert (settings.shadow_mode, settings.debt, settings.envoy_headers) == (True, False, True)
    assert settings.envoy_header_names == ("X-Limit", "X-Left", "X-Reset")
    assert settings.merge_domains is True
    assert (settings.quota_mode, settings.dynamic_metadata) == (True, True)
    assert (settings.healthcheck_store, settings.healthcheck_rules) == (True, True)
    assert settings.store == (
        "redis://ratelimit:p%40ss%3Aword@redis.internal:6379/0?timeout=90&prefix=team-a:rk"
    )


@pytest.mark.parametrize(
    ("variables", "url"),
    [
        ({"REDIS_URL": "10.0.0.1:6380", "REDIS_AUTH": "secret"}, "redis://:secret@10.0.0.1:6380/0"),
        ({"REDIS_URL": "[::1]:6379"}, "redis://[::1]:6379/0"),
        (
            {"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/redis/redis.sock"},
            "unix:///run/redis/redis.sock?db=0",
        ),
        (
            {"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/r.sock", "REDIS_TIMEOUT": "250ms"},
            "unix:///run/r.sock?db=0&timeout=0.25",
        ),
        (
            {
                "REDIS_TLS": "true",
                "REDIS_TLS_CACERT": "/etc/tls/ca.pem",
                "REDIS_TLS_CLIENT_CERT": "/etc/tls/client.pem",
                "REDIS_TLS_CLIENT_KEY": "/etc/tls/client.key",
                "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true",
            },
            "rediss://redis.internal:6379/0?ssl_ca_certs=/etc/tls/ca.pem"
            "&ssl_certfile=/etc/tls/client.pem&ssl_keyfile=/etc/tls/client.key"
            "&ssl_check_hostname=false",
        ),
        (
            {"REDIS_TYPE": "CLUSTER", "REDIS_URL": "n1:7000,n2:7001", "REDIS_AUTH": "pw"},
            "redis+cluster://:pw@n1:7000,n2:7001",
        ),
        (
            {"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379"},
            "redis+sentinel://s1:26379,s2:26379/mymaster",
        ),
        (
            {
                "REDIS_TYPE": "SENTINEL",
                "REDIS_URL": "m,s1:26379",
                "REDIS_AUTH": "master-pw",
                "REDIS_SENTINEL_AUTH": "s&cret",
            },
            "redis+sentinel://:master-pw@s1:26379/m?sentinel_password=s%26cret",
        ),
        (
            {"REDIS_TYPE": "SENTINEL", "REDIS_URL": "m,s1:1", "REDIS_SENTINEL_AUTH": "rl:p:w"},
            "redis+sentinel://s1:1/m?sentinel_username=rl&sentinel_password=p:w",
        ),
        # only read for a Sentinel, as the reference reads it
        ({"REDIS_URL": "10.0.0.1:6380", "REDIS_SENTINEL_AUTH": "pw"}, "redis://10.0.0.1:6380/0"),
        (
            {
                "REDIS_PERSECOND": "true",
                "REDIS_PERSECOND_SOCKET_TYPE": "tcp",
                "REDIS_PERSECOND_URL": "redis.internal:6379",
            },
            "redis://redis.internal:6379/0",
        ),
    ],
)
def test_the_redis_variables_become_one_store_url(
    reference: dict[str, str], variables: dict[str, str], url: str
) -> None:
    assert read([], {**reference, **variables}).store == url


def test_unset_redis_variables_are_the_references_defaults(runtime: Path) -> None:
    settings = read(
        ["--compat", "envoy-ratelimit"],
        {"RUNTIME_ROOT": str(runtime), "RUNTIME_SUBDIRECTORY": "ratelimit"},
    )
    assert settings.store == "unix:///var/run/nutcracker/ratelimit.sock?db=0"


def test_flags_and_ratekeeper_variables_win_and_their_variables_are_not_read(
    reference: dict[str, str], tmp_path: Path
) -> None:
    rules = tmp_path / "mine.yaml"
    rules.write_text(RULE)
    # These would stop the start, were the store read from them.
    broken = {**reference, "REDIS_TYPE": "CLUSTER", "REDIS_TLS": "true"}
    settings = read(
        ["--http", "127.0.0.1:7000", "--compat", "envoy-ratelimit", "--rules", str(rules)],
        {**broken, "RATEKEEPER_STORE": "redis://elsewhere:6379/0", "PORT": "9"},
    )
    assert settings.store == "redis://elsewhere:6379/0"
    assert settings.http == ListenAddress("127.0.0.1", 7000)
    assert settings.rules == (str(rules),)
    assert (logging.INFO, "$PORT: not read: --http wins") in settings.notes
    assert (
        logging.INFO,
        "$REDIS_SOCKET_TYPE, $REDIS_TYPE, $REDIS_URL, $REDIS_TLS: not read: --store wins",
    ) in settings.notes


def test_none_reads_nothing_and_rules_given_turn_the_automatic_mode_off(
    reference: dict[str, str], tmp_path: Path
) -> None:
    assert read(["--compat", "none"], reference) == Settings()
    assert read([], {**reference, "RATEKEEPER_COMPAT": "none"}) == Settings()
    rules = tmp_path / "mine.yaml"
    rules.write_text(RULE)
    settings = read(["--rules", str(rules)], reference)
    assert (settings.compat, settings.store, settings.rules) == ("none", "memory://", (str(rules),))
    assert errors_of(["--compat", "envoy"], reference) == [
        "--compat: expected one of envoy-ratelimit, none, not 'envoy'"
    ]
    assert errors_of([], {**reference, "RATEKEEPER_COMPAT": "yes"}) == [
        "--compat (from $RATEKEEPER_COMPAT): expected one of envoy-ratelimit, none, not 'yes'"
    ]


def test_without_runtime_root_nothing_is_read() -> None:
    settings = read([], {"REDIS_URL": "10.0.0.1:6379", "PORT": "9"})
    assert (settings.compat, settings.store, settings.rules) == (
        "none",
        "memory://",
        (EXAMPLE_RULES,),
    )


MSG = "(docs/migrating.md says what ratekeeper reads)"


@pytest.mark.parametrize(
    ("variables", "error"),
    [
        (
            {"BACKEND_TYPE": "memcache"},
            "$BACKEND_TYPE=memcache: not supported: memcache is not supported; ratekeeper's "
            f"stores are Redis or memory {MSG}",
        ),
        (
            {"CONFIG_TYPE": "GRPC_XDS_SOTW"},
            "$CONFIG_TYPE=GRPC_XDS_SOTW: not supported: ratekeeper reads rule files, not an xDS "
            f"server {MSG}",
        ),
        (
            {"GRPC_UDS": "/nowhere/ratelimit.sock"},
            "--grpc (from $GRPC_UDS): no such directory: '/nowhere' (for "
            "'unix:/nowhere/ratelimit.sock')",
        ),
        (
            {"GRPC_SERVER_USE_TLS": "true"},
            "$GRPC_SERVER_USE_TLS=true: TLS needs $GRPC_SERVER_TLS_CERT and "
            "$GRPC_SERVER_TLS_KEY, the server's certificate and key files",
        ),
        (
            {"REDIS_PERSECOND": "true", "REDIS_PERSECOND_URL": "/run/persecond.sock"},
            "$REDIS_PERSECOND=true: not supported: ratekeeper keeps every limit in one store, "
            "and REDIS_PERSECOND_* name another server than REDIS_*: unset REDIS_PERSECOND, so "
            f"that per-second limits share the main Redis {MSG}",
        ),
        (
            {"REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:1", "REDIS_TLS": "true"},
            "$REDIS_TLS=true: not supported: ratekeeper opens no TLS connection to "
            f"REDIS_TYPE=CLUSTER {MSG}",
        ),
        (
            {"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/r.sock", "REDIS_TLS": "true"},
            "$REDIS_TLS=true: not supported: ratekeeper opens no TLS connection to a Unix "
            f"socket {MSG}",
        ),
        (
            {"REDIS_TYPE": "replicated"},
            f"$REDIS_TYPE=replicated: not supported: expected SINGLE, SENTINEL or CLUSTER {MSG}",
        ),
        (
            {"REDIS_SOCKET_TYPE": "udp"},
            f"$REDIS_SOCKET_TYPE=udp: not supported: expected tcp or unix {MSG}",
        ),
        ({"REDIS_URL": "redis://r:6379"}, "$REDIS_URL: expected host:port, not 'redis://r:6379'"),
        (
            {"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "127.0.0.1:6379"},
            "$REDIS_URL=127.0.0.1:6379: expected the absolute path of Redis's Unix socket, as "
            "$REDIS_SOCKET_TYPE is set to unix; for host:port set REDIS_SOCKET_TYPE=tcp",
        ),
        (
            {"REDIS_SOCKET_TYPE": None, "REDIS_URL": "redis:6379"},
            "$REDIS_URL=redis:6379: expected the absolute path of Redis's Unix socket, as "
            "$REDIS_SOCKET_TYPE is unix by default; for host:port set REDIS_SOCKET_TYPE=tcp",
        ),
        (
            {"REDIS_TYPE": "SENTINEL", "REDIS_URL": "s1:26379"},
            "$REDIS_URL: expected master,host:port,... for a Sentinel, not 's1:26379'",
        ),
        (
            {"REDIS_TIMEOUT": "10"},
            "$REDIS_TIMEOUT: expected a duration such as 500ms or 2s, not '10'",
        ),
        (
            {"REDIS_TIMEOUT": "2h"},
            "$REDIS_TIMEOUT=2h: not supported: ratekeeper times every Redis call out, after more "
            f"than 0 and less than an hour {MSG}",
        ),
        (
            {"CACHE_KEY_PREFIX": "{tenant}"},
            "$CACHE_KEY_PREFIX={tenant}: not supported: a prefix with { or } would move the "
            f"keys' Redis Cluster hash tag {MSG}",
        ),
        ({"SHADOW_MODE": "yes"}, "$SHADOW_MODE: expected true or false, not 'yes'"),
        ({"QUOTA_MODE": "on"}, "$QUOTA_MODE: expected true or false, not 'on'"),
        (
            {"RESPONSE_DYNAMIC_METADATA": "yes"},
            "$RESPONSE_DYNAMIC_METADATA: expected true or false, not 'yes'",
        ),
        ({"PORT": "http"}, "$PORT: expected a port from 1 to 65535, not 'http'"),
        ({"GRPC_PORT": "0"}, "$GRPC_PORT: expected a port from 1 to 65535, not '0'"),
        (
            {"RUNTIME_SUBDIRECTORY": ""},
            "$RUNTIME_SUBDIRECTORY is empty: the reference loads no rules then "
            "(RUNTIME_WATCH_ROOT is true); set it so that "
            "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY is the rule directory",
        ),
    ],
)
def test_a_value_ratekeeper_cannot_honour_stops_the_start_by_name(
    reference: dict[str, str], variables: dict[str, str | None], error: str
) -> None:
    environ = {
        name: value for name, value in {**reference, **variables}.items() if value is not None
    }
    assert errors_of([], environ) == [error]


def test_a_bad_setting_the_reference_gives_is_named_with_its_variables(
    reference: dict[str, str],
) -> None:
    errors = errors_of([], {**reference, "LOG_LEVEL": "loud", "LIMIT_RESET_HEADER": "a b"})
    assert errors == [
        "--log-level (from $LOG_LEVEL): expected one of debug, info, warn (or warning), "
        "error, not 'loud'",
        "--envoy-header-names (from $LIMIT_RESET_HEADER): expected three header names "
        "LIMIT,REMAINING,RESET, such as X-RateLimit-Limit,X-RateLimit-Remaining,"
        "X-RateLimit-Reset, not 'RateLimit-Limit,RateLimit-Remaining,a b'",
    ]


@pytest.mark.parametrize("name", [name for name, v in VARIABLES.items() if v.fate == IGNORED])
def test_each_ignored_variable_that_is_set_is_one_line(
    reference: dict[str, str], name: str
) -> None:
    environ = {**reference, name: "1"}
    notes = [note for note in read([], environ).notes if f"${name}=" in note[1]]
    assert len(notes) == 1
    level, message = notes[0]
    assert message == f"${name}=1: ignored: {VARIABLES[name].note}"
    assert level == (logging.WARNING if VARIABLES[name].warn else logging.INFO)


def test_statsd_the_references_default_is_sent_to_localhost(
    reference: dict[str, str],
) -> None:
    unset = {k: v for k, v in reference.items() if k != "USE_STATSD"}
    settings = read([], unset)
    assert settings.statsd == ListenAddress("localhost", 8125)
    assert [note for note in settings.notes if "USE_STATSD" in note[1]] == [
        (
            logging.INFO,
            "$USE_STATSD=true (the reference's default): the statistics go to StatsD at "
            "localhost:8125 over TCP (--statsd); USE_STATSD=false stops them",
        )
    ]
    assert settings.sources["statsd"] == (
        "--statsd (from $USE_STATSD, $STATSD_HOST, $STATSD_PORT, $DISABLE_STATS)"
    )
    assert read([], reference).statsd is None
    disabled = read([], {**unset, "DISABLE_STATS": "true", "USE_PROMETHEUS": "true"})
    assert (disabled.statsd, disabled.stats_prometheus) == (None, None)
    assert not [note for note in disabled.notes if "STAT" in note[1]]


def test_the_references_statistics_variables_are_read_as_it_reads_them(
    reference: dict[str, str], tmp_path: Path
) -> None:
    mapper = tmp_path / "mapper.yaml"
    mapper.write_text("mappings: []\n")
    settings = read(
        [],
        {
            **reference,
            "USE_STATSD": "true",
            "STATSD_HOST": "statsd.internal",
            "STATSD_PORT": "9125",
            "USE_DOG_STATSD": "true",
            "EXTRA_TAGS": "env:prod,az:eu-1",
            "STATS_FLUSH_INTERVAL": "1m30s",
            "USE_PROMETHEUS": "true",
            "PROMETHEUS_PATH": "/stats",
            "PROMETHEUS_MAPPER_YAML": str(mapper),
            "NEAR_LIMIT_RATIO": "0.5",
        },
    )
    assert settings.statsd == settings.dogstatsd == ListenAddress("statsd.internal", 9125)
    assert settings.stats_tags == (("env", "prod"), ("az", "eu-1"))
    assert settings.stats_flush_interval == 90.0
    assert settings.stats_prometheus == ListenAddress("0.0.0.0", 9090)
    assert (settings.stats_prometheus_path, settings.stats_prometheus_mapper) == (
        "/stats",
        str(mapper),
    )
    assert settings.near_limit_ratio == 0.5
    assert (
        logging.INFO,
        "$USE_STATSD and $USE_DOG_STATSD, $USE_PROMETHEUS are both true: the reference "
        "refuses more than one sink; ratekeeper sends to each",
    ) in settings.notes


def test_bad_statistics_variables_stop_the_start(reference: dict[str, str]) -> None:
    assert errors_of([], {**reference, "STATS_FLUSH_INTERVAL": "0"}) == [
        "$STATS_FLUSH_INTERVAL: expected a duration above 0, not 0.0"
    ]
    errors = errors_of([], {**reference, "USE_DOG_STATSD_MOGRIFIERS": "TAGGED"})
    assert errors == [
        "--dogstatsd-mogrifiers (from $USE_DOG_STATSD_MOGRIFIERS): no "
        "$DOG_STATSD_MOGRIFIER_TAGGED_PATTERN for the mogrifier TAGGED"
    ]
    errors = errors_of([], {**reference, "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":8080"})
    assert errors == [
        "--stats-prometheus (from $USE_PROMETHEUS, $PROMETHEUS_ADDR): the statistics' listener "
        "(0.0.0.0:8080) needs a port other than --http's (0.0.0.0:8080)"
    ]


def test_every_variable_of_the_reference_has_a_fate() -> None:
    assert len(VARIABLES) == 114
    for name, variable in VARIABLES.items():
        assert variable.fate in (HONOURED, CHECKED, IGNORED), name
        if variable.fate == HONOURED:
            assert variable.setting.startswith("--"), name
        else:
            assert variable.note, name
        if variable.fate == CHECKED:
            assert variable.accepts, name
    # docs/migrating.md gives the counts.
    fates = Counter(variable.fate for variable in VARIABLES.values())
    page = " ".join((DOCS / "migrating.md").read_text(encoding="utf-8").split())
    honoured, checked, ignored = fates[HONOURED], fates[CHECKED], fates[IGNORED]
    assert f"of its 114, **{honoured} are honoured, {checked} checked (some values" in page
    assert f"stop the start) and {ignored} ignored**" in page


def test_translate_alone_leaves_the_given_settings_and_their_errors_out(
    reference: dict[str, str],
) -> None:
    broken = {**reference, "REDIS_TYPE": "nope", "PORT": "x"}
    everything = translate(broken)
    assert len(everything.errors) == 2
    assert translate(broken, given={"store", "http"}).errors == []


# -- the runtime directory ---------------------------------------------------------------------


def test_hidden_files_are_ignored_when_the_reference_ignores_them(
    reference: dict[str, str], runtime: Path
) -> None:
    config = runtime / "ratelimit" / "config"
    (config / ".rl.yaml.swp").write_text("not yaml {")
    (config / "..2026_01_01").mkdir()
    (config / "..2026_01_01" / "rl.yaml").write_text(RULE)
    settings = read([], {**reference, "RUNTIME_IGNOREDOTFILES": "true"})
    assert settings.rules == (str(config),)
    assert list(load_rules(settings.rules).sources) == [str(config / "rl.yaml")]
    errors = errors_of([], reference)
    assert errors == [
        f"$RUNTIME_ROOT: {config / '..2026_01_01' / 'rl.yaml'}, {config / '.rl.yaml.swp'}: "
        "the reference loads these as rule files (hidden ones too, as RUNTIME_IGNOREDOTFILES "
        f"is false), ratekeeper only the *.yaml and *.yml files directly in {config}, never "
        "hidden ones: rename or move them, or set RUNTIME_IGNOREDOTFILES=true for hidden ones"
    ]


@pytest.mark.parametrize("watch_root", ["true", "false"])
def test_files_the_reference_would_load_and_ratekeeper_would_not_stop_the_start(
    reference: dict[str, str], runtime: Path, watch_root: str
) -> None:
    config = runtime / "ratelimit" / "config"
    (config / "more.conf").write_text(RULE)
    (config / "team").mkdir()
    (config / "team" / "team.yaml").write_text(RULE)
    (runtime / "ratelimit" / "reload.yaml").write_text("not a rule file")  # never loaded
    environ = {**reference, "RUNTIME_WATCH_ROOT": watch_root}
    (error,) = errors_of([], environ)
    assert error.startswith(
        f"$RUNTIME_ROOT: {config / 'more.conf'}, {config / 'team' / 'team.yaml'}: "
    )
    os.remove(config / "more.conf")
    os.remove(config / "team" / "team.yaml")
    assert read([], environ).rules == (str(config),)


def test_with_the_root_watched_a_file_beside_the_directory_named_like_it_is_loaded_too(
    reference: dict[str, str], runtime: Path
) -> None:
    """The reference keeps the files whose key starts with ``config.``: ``config.yaml``
    beside ``config/`` is one of them."""
    beside = runtime / "ratelimit" / "config.yaml"
    beside.write_text(RULE)
    (error,) = errors_of([], reference)
    assert error.startswith(f"$RUNTIME_ROOT: {beside}: ")
    assert read([], {**reference, "RUNTIME_WATCH_ROOT": "false"}).rules == (
        str(runtime / "ratelimit" / "config"),
    )


def test_a_missing_runtime_directory_is_named(reference: dict[str, str], runtime: Path) -> None:
    errors = errors_of([], {**reference, "RUNTIME_SUBDIRECTORY": "other"})
    assert errors == [
        f"--rules (from $RUNTIME_ROOT, $RUNTIME_SUBDIRECTORY): no such file or directory: "
        f"'{runtime / 'other' / 'config'}'"
    ]


def test_the_migration_guide_has_a_row_for_every_variable_saying_its_fate() -> None:
    guide = (Path(__file__).resolve().parents[3] / "docs" / "migrating.md").read_text()
    rows = {
        line.split("|")[1].strip().strip("`"): line.split("|")[3].strip()
        for line in guide.splitlines()
        if line.startswith("| `") and line.count("|") >= 4
    }
    for name, variable in VARIABLES.items():
        assert name in rows, name
        what = rows[name]
        if variable.fate == IGNORED:
            assert what.startswith("ignored (harmless because "), name
        elif variable.fate == CHECKED:
            assert "the start stops" in what or "compared with" in what, name
        else:
            assert not what.startswith(("ignored", "checked")), name
            assert variable.setting in guide, name


def test_the_workers_read_back_what_the_references_variables_said(
    reference: dict[str, str],
) -> None:
    from ratekeeper.service.runtime.serve import _environment

    given = read(
        [],
        {**reference, "MERGE_DOMAIN_CONFIG": "true", "SHADOW_MODE": "true", "PORT": "9000"},
    )
    exported = _environment(given)
    # The reference's variables stay in the workers' environment: they are not read again.
    again = Settings.read(None, {**reference, **exported})
    assert again == dataclasses.replace(given, compat="none")
    assert (again.merge_domains, again.shadow_mode, again.http.port) == (True, True, 9000)
    assert again.notes == ()


def test_serve_takes_a_unix_socket_store() -> None:
    settings = read(["--store", "unix:///run/redis/redis.sock?db=2&prefix=team"], {})
    assert settings.store == "unix:///run/redis/redis.sock?db=2&prefix=team"
    assert errors_of(["--store", "socket:///run/redis.sock"], {})[0].startswith(
        "--store: expected a URL starting with one of memory://, redis://, rediss://, unix://"
    )


def test_the_references_variables_without_runtime_root_are_a_warning_not_silence() -> None:
    environ = {"REDIS_URL": "127.0.0.1:6379", "REDIS_SOCKET_TYPE": "tcp", "PORT": "9000"}
    settings = read([], environ)
    assert settings.compat == "none"
    assert settings.store == "memory://"
    assert settings.notes == (
        (
            logging.WARNING,
            "$REDIS_URL, $REDIS_SOCKET_TYPE: set but not read: ratekeeper reads "
            "envoyproxy/ratelimit's variables with --compat envoy-ratelimit (or "
            "RATEKEEPER_COMPAT=envoy-ratelimit), or when RUNTIME_ROOT is set and no rules "
            "are given",
        ),
    )
    # asked for none, or only common variables set: nothing to say
    assert read(["--compat", "none"], environ).notes == ()
    assert read([], {"RATEKEEPER_COMPAT": "none", **environ}).notes == ()
    assert read([], {"HOST": "0.0.0.0", "PORT": "9000", "LOG_LEVEL": "info"}).notes == ()


def test_compat_mode_keeps_the_overrides_in_memory_unless_told(
    reference: dict[str, str], tmp_path: Path
) -> None:
    settings = read([], reference)
    assert settings.config == "sqlite://:memory:"
    assert settings.sources["config"] == "--config (from --compat envoy-ratelimit)"
    # the service's own "configuration store:" line says it, once: no note says it again
    assert not any("configuration store" in message for _, message in settings.notes)
    durable = f"sqlite:///{tmp_path}/overrides.db"
    assert read(["--config", durable], reference).config == durable
    assert read([], {**reference, "RATEKEEPER_CONFIG": durable}).config == durable
    assert read(["--compat", "none"], reference).config == "sqlite:///ratekeeper.db"


def test_healthy_with_at_least_one_config_loaded_starts_without_a_rule_file(
    reference: dict[str, str], runtime: Path
) -> None:
    """It starts unhealthy instead, as the reference does (``tests/service/test_healthcheck.py``
    runs it)."""
    environ = {**reference, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true"}
    empty = runtime.parent / "v1" / "ratelimit" / "config"
    (empty / "rl.yaml").unlink()
    for variables in (environ, reference):
        settings = read([], variables)
        assert settings.rules == (str(runtime / "ratelimit" / "config"),)
        assert settings.healthcheck_rules is (variables is environ)
    assert read(["--healthcheck-rules"], reference).healthcheck_rules is True
