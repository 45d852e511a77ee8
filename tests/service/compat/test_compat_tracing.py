"""envoyproxy/ratelimit's tracing variables as ``Settings.read`` reads them: read only with
``TRACING_ENABLED=true``, as the reference reads them, into the ``--tracing`` settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratekeeper.core.errors import ConfigError
from ratekeeper.service.runtime.serve import _environment
from ratekeeper.service.runtime.settings import Settings
from tests.service.runtime.command_line import read

RULE = (
    "domain: rl\ndescriptors:\n  - key: foo\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
)


@pytest.fixture
def reference(tmp_path: Path) -> dict[str, str]:
    """A deployment of the reference, its tracing off."""
    config = tmp_path / "ratelimit" / "config"
    config.mkdir(parents=True)
    (config / "rl.yaml").write_text(RULE)
    return {
        "RUNTIME_ROOT": str(tmp_path),
        "RUNTIME_SUBDIRECTORY": "ratelimit",
        "REDIS_SOCKET_TYPE": "tcp",
        "REDIS_URL": "redis.internal:6379",
        "USE_STATSD": "false",
    }


def tracing_of(settings: Settings) -> tuple[object, ...]:
    return (
        settings.tracing,
        settings.trace_sample_rate,
        settings.trace_service_name,
        settings.trace_service_namespace,
        settings.trace_service_instance_id,
    )


def test_tracing_enabled_reads_every_tracing_variable(reference: dict[str, str]) -> None:
    settings = read(
        [],
        {
            **reference,
            "TRACING_ENABLED": "true",
            "TRACING_EXPORTER_PROTOCOL": "grpc",
            "TRACING_SAMPLING_RATE": "0.25",
            "TRACING_SERVICE_NAME": "edge",
            "TRACING_SERVICE_NAMESPACE": "team-a",
            "TRACING_SERVICE_INSTANCE_ID": "pod-7",
        },
    )
    assert tracing_of(settings) == ("otlp-grpc", 0.25, "edge", "team-a", "pod-7")
    assert (
        settings.sources["tracing"]
        == "--tracing (from $TRACING_ENABLED, $TRACING_EXPORTER_PROTOCOL)"
    )
    assert (
        settings.sources["trace_sample_rate"] == "--trace-sample-rate (from $TRACING_SAMPLING_RATE)"
    )
    # the workers are told the same, and read it back
    again = Settings.read(None, _environment(settings))
    assert tracing_of(again) == tracing_of(settings)


def test_the_references_defaults_once_enabled(reference: dict[str, str]) -> None:
    settings = read([], {**reference, "TRACING_ENABLED": "True"})
    # OTLP over HTTP, every trace sampled, service RateLimit, a random instance id
    assert tracing_of(settings) == ("otlp-http", 1.0, "RateLimit", "", "")
    assert (
        tracing_of(
            read([], {**reference, "TRACING_EXPORTER_PROTOCOL": "", "TRACING_ENABLED": "1"})
        )[0]
        == "otlp-http"
    )


def test_not_enabled_no_tracing_variable_is_read(reference: dict[str, str]) -> None:
    settings = read(
        [],
        {
            **reference,
            "TRACING_EXPORTER_PROTOCOL": "carrier-pigeon",
            "TRACING_SAMPLING_RATE": "7",
            "TRACING_SERVICE_NAME": "edge",
        },
    )
    assert tracing_of(settings) == ("off", 1.0, None, "", "")
    assert not any(name.startswith("trace") for name in settings.sources)


def test_the_flags_win_over_the_tracing_variables(reference: dict[str, str]) -> None:
    environ = {**reference, "TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "0.5"}
    settings = read(["--tracing", "off", "--trace-sample-rate", "0.1"], environ)
    assert tracing_of(settings) == ("off", 0.1, "RateLimit", "", "")
    assert (20, "$TRACING_ENABLED: not read: --tracing wins") in settings.notes


@pytest.mark.parametrize(
    ("variables", "error"),
    [
        (
            {"TRACING_EXPORTER_PROTOCOL": "zipkin"},
            "$TRACING_EXPORTER_PROTOCOL: expected http or grpc, not 'zipkin' (the reference "
            "stops its start too)",
        ),
        (
            {"TRACING_SAMPLING_RATE": "2"},
            "--trace-sample-rate (from $TRACING_SAMPLING_RATE): expected a number from 0 to 1, "
            "such as 0.01, not '2'",
        ),
        (
            {"TRACING_SAMPLING_RATE": "NaN"},
            "--trace-sample-rate (from $TRACING_SAMPLING_RATE): expected a number from 0 to 1, "
            "such as 0.01, not 'NaN'",
        ),
    ],
)
def test_a_tracing_value_ratekeeper_cannot_take_stops_the_start_by_name(
    reference: dict[str, str], variables: dict[str, str], error: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        read([], {**reference, "TRACING_ENABLED": "true", **variables})
    assert caught.value.errors == [error]


@pytest.mark.parametrize(
    ("argv", "environ", "error"),
    [
        (
            ["--tracing", "jaeger"],
            {},
            "--tracing: expected one of off, otlp-http, otlp-grpc, not 'jaeger'",
        ),
        ([], {"RATEKEEPER_TRACE_SAMPLE_RATE": "-0"}, None),
        (
            [],
            {"RATEKEEPER_TRACE_SAMPLE_RATE": "1.0001"},
            "--trace-sample-rate (from $RATEKEEPER_TRACE_SAMPLE_RATE): expected a number from 0 "
            "to 1, such as 0.01, not '1.0001'",
        ),
        (
            ["--trace-service-name", "a\tb"],
            {},
            "--trace-service-name: expected printable characters, not 'a\\tb'",
        ),
    ],
)
def test_the_tracing_flags_are_checked(
    argv: list[str], environ: dict[str, str], error: str | None
) -> None:
    if error is None:
        assert read(argv, environ).trace_sample_rate == 0.0
        return
    with pytest.raises(ConfigError) as caught:
        read(argv, environ)
    assert caught.value.errors == [error]
