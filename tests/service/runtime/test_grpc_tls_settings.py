"""gRPC's TLS and Unix socket settings as ``ratekeeper serve`` reads them: flags, their
``RATEKEEPER_*`` variables and envoyproxy/ratelimit's, each bad value one line naming where it
came from (no server runs here)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ratekeeper.core.errors import ConfigError
from ratekeeper.service.runtime.serve import _environment
from ratekeeper.service.runtime.settings import Settings, UnixAddress
from tests.certificates import make_certificates
from tests.service.runtime.command_line import read


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    made = make_certificates(tmp_path_factory.mktemp("certificates"))
    return {name: str(path) for name, path in made.items()}


def errors_of(argv: list[str], environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        read(argv, environ)
    return caught.value.errors


def tls_flags(files: dict[str, str]) -> list[str]:
    return ["--grpc-tls-cert", files["server.crt"], "--grpc-tls-key", files["server.key"]]


def test_the_flags_and_variables_set_tls_and_the_workers_read_them_back(
    files: dict[str, str], tmp_path: Path
) -> None:
    argv = [*tls_flags(files), "--grpc-tls-client-ca", files["ca.crt"]]
    argv += ["--grpc-tls-client-san", "envoy.mesh", "--grpc", f"unix:{tmp_path}/rk.sock"]
    settings = read(argv)
    assert (settings.grpc_tls_cert, settings.grpc_tls_key) == (
        files["server.crt"],
        files["server.key"],
    )
    assert (settings.grpc_tls_client_ca, settings.grpc_tls_client_san) == (
        files["ca.crt"],
        "envoy.mesh",
    )
    assert settings.grpc == UnixAddress(f"{tmp_path}/rk.sock")
    assert Settings.read(None, _environment(settings)) == settings
    from_variables = read([], {"RATEKEEPER_GRPC_TLS_CERT": files["server.crt"],
                               "RATEKEEPER_GRPC_TLS_KEY": files["server.key"]})  # fmt: skip
    assert from_variables.grpc_tls_cert == files["server.crt"]
    assert from_variables.grpc_tls_client_ca is None


@pytest.mark.parametrize(
    ("address", "path"),
    [("unix:{d}/a.sock", "{d}/a.sock"), ("unix://{d}/b.sock", "{d}/b.sock")],
)
def test_grpc_takes_grpcs_unix_syntax(tmp_path: Path, address: str, path: str) -> None:
    settings = read(["--grpc", address.format(d=tmp_path)])
    assert str(settings.grpc) == "unix:" + path.format(d=tmp_path)


def test_each_bad_tls_or_socket_setting_is_one_line(files: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "not.pem").write_text("hello\n")
    (tmp_path / "file").write_text("")
    cert, key, ca = files["server.crt"], files["server.key"], files["ca.crt"]
    cases = {
        ("--grpc-tls-cert", "/nowhere/server.crt", "--grpc-tls-key", key): [
            "--grpc-tls-cert: no such file: '/nowhere/server.crt'"
        ],
        ("--grpc-tls-cert", cert, "--grpc-tls-key", str(tmp_path / "not.pem")): [
            f"--grpc-tls-key: {str(tmp_path / 'not.pem')!r} holds no PEM block (-----BEGIN ...)"
        ],
        ("--grpc-tls-key", key): ["--grpc-tls-key: TLS needs --grpc-tls-cert too"],
        ("--grpc-tls-cert", cert): ["--grpc-tls-cert: TLS needs --grpc-tls-key too"],
        ("--grpc-tls-client-ca", ca): ["--grpc-tls-client-ca: mTLS needs --grpc-tls-cert and -key"],
        (*tls_flags(files), "--grpc-tls-client-san", "envoy"): [
            "--grpc-tls-client-san: a client SAN is checked on client certificates, which "
            "only --grpc-tls-client-ca asks for"
        ],
        ("--grpc", f"unix:{tmp_path}/missing/rk.sock"): [
            f"--grpc: no such directory: '{tmp_path}/missing' (for "
            f"'unix:{tmp_path}/missing/rk.sock')"
        ],
        ("--grpc", f"unix:{tmp_path}/file"): [
            f"--grpc: '{tmp_path}/file' exists and is no socket: a Unix socket cannot replace it"
        ],
        ("--grpc", "unix:"): ["--grpc: expected unix:PATH, the socket's path, not 'unix:'"],
        ("--grpc", "8081"): [
            "--grpc: expected HOST:PORT with a port from 1 to 65535, or unix:PATH, not '8081'"
        ],
        ("--grpc", f"unix:{tmp_path}/rk.sock", "--workers", "2", "--store", "redis://r:6379"): [
            "--grpc: a Unix socket has one listener, and each worker would take it from the "
            "last; more workers need a TCP HOST:PORT"
        ],
        (*tls_flags(files), "--server", "pyvoy"): [
            "--grpc-tls-cert: --server pyvoy serves gRPC in plaintext on the HTTP address "
            "(h2c); TLS needs --server uvicorn"
        ],
        ("--grpc", f"unix:{tmp_path}/rk.sock", "--server", "pyvoy"): [
            "--grpc: --server pyvoy serves gRPC in plaintext on the HTTP address (h2c); a Unix "
            "socket needs --server uvicorn"
        ],
    }
    for argv, errors in cases.items():
        assert errors_of(list(argv)) == errors, argv


def test_a_key_that_is_not_the_certificates_is_refused(files: dict[str, str]) -> None:
    argv = ["--grpc-tls-cert", files["server.crt"], "--grpc-tls-key", files["client.key"]]
    (error,) = errors_of(argv)
    assert error.startswith(
        "--grpc-tls-cert and --grpc-tls-key: not a certificate and its private key ("
    )
    assert "KEY_VALUES_MISMATCH" in error.upper() or "mismatch" in error


def test_a_client_ca_that_holds_no_certificate_is_refused(files: dict[str, str]) -> None:
    argv = [*tls_flags(files), "--grpc-tls-client-ca", files["server.key"]]
    (error,) = errors_of(argv)
    assert error.startswith("--grpc-tls-client-ca: no CA certificate (")


# -- envoyproxy/ratelimit's variables ---------------------------------------------------------


@pytest.fixture
def reference(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "runtime" / "ratelimit" / "config"
    config.mkdir(parents=True)
    (config / "rl.yaml").write_text("domain: rl\n")
    return {"RUNTIME_ROOT": str(tmp_path / "runtime"), "RUNTIME_SUBDIRECTORY": "ratelimit",
            "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "USE_STATSD": "false"}  # fmt: skip


def test_the_references_tls_and_socket_variables_become_the_settings(
    reference: dict[str, str], files: dict[str, str], tmp_path: Path
) -> None:
    environ = {
        **reference,
        "GRPC_SERVER_USE_TLS": "true",
        "GRPC_SERVER_TLS_CERT": files["server.crt"],
        "GRPC_SERVER_TLS_KEY": files["server.key"],
        "GRPC_CLIENT_TLS_CACERT": files["ca.crt"],
        "GRPC_CLIENT_TLS_SAN": "envoy.mesh",
        "GRPC_UDS": f"{tmp_path}/ratelimit.sock",
        "GRPC_PORT": "9999",  # not read with GRPC_UDS, as the reference reads it
    }
    settings = read([], environ)
    assert settings.grpc == UnixAddress(f"{tmp_path}/ratelimit.sock")
    assert (
        settings.grpc_tls_cert,
        settings.grpc_tls_key,
        settings.grpc_tls_client_ca,
        settings.grpc_tls_client_san,
    ) == (files["server.crt"], files["server.key"], files["ca.crt"], "envoy.mesh")
    assert settings.sources["grpc"] == "--grpc (from $GRPC_UDS, $GRPC_PORT)"
    assert settings.sources["grpc_tls_cert"] == (
        "--grpc-tls-cert (from $GRPC_SERVER_USE_TLS, $GRPC_SERVER_TLS_CERT)"
    )


def test_the_references_tls_files_without_use_tls_are_not_read(
    reference: dict[str, str], files: dict[str, str]
) -> None:
    environ = {**reference, "GRPC_SERVER_TLS_CERT": files["server.crt"],
               "GRPC_CLIENT_TLS_SAN": "envoy.mesh"}  # fmt: skip
    settings = read([], environ)
    assert (settings.grpc_tls_cert, settings.grpc_tls_client_san) == (None, None)
    assert [note for note in settings.notes if "GRPC_S" in note[1] or "GRPC_C" in note[1]] == [
        (logging.INFO, "$GRPC_SERVER_TLS_CERT: not read: $GRPC_SERVER_USE_TLS is not true"),
        (logging.INFO, "$GRPC_CLIENT_TLS_SAN: not read: $GRPC_SERVER_USE_TLS is not true"),
    ]


@pytest.mark.parametrize(
    ("variables", "errors"),
    [
        (
            {"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_KEY": "{server.key}"},
            [
                "$GRPC_SERVER_USE_TLS=true: TLS needs $GRPC_SERVER_TLS_CERT and "
                "$GRPC_SERVER_TLS_KEY, the server's certificate and key files"
            ],
        ),
        (
            {"GRPC_SERVER_USE_TLS": "yes"},
            ["$GRPC_SERVER_USE_TLS: expected true or false, not 'yes'"],
        ),
        (
            {"GRPC_SERVER_USE_TLS": "1", "GRPC_SERVER_TLS_CERT": "/nowhere/c.pem",
             "GRPC_SERVER_TLS_KEY": "{server.key}"},
            ["--grpc-tls-cert (from $GRPC_SERVER_USE_TLS, $GRPC_SERVER_TLS_CERT): no such "
             "file: '/nowhere/c.pem'"],
        ),
        (
            {"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "{server.crt}",
             "GRPC_SERVER_TLS_KEY": "{server.key}", "GRPC_CLIENT_TLS_SAN": "envoy"},
            ["--grpc-tls-client-san (from $GRPC_CLIENT_TLS_SAN): a client SAN is checked on "
             "client certificates, which only --grpc-tls-client-ca asks for"],
        ),
        (
            {"GRPC_UDS": "/nowhere/ratelimit.sock"},
            ["--grpc (from $GRPC_UDS): no such directory: '/nowhere' (for "
             "'unix:/nowhere/ratelimit.sock')"],
        ),
    ],
)  # fmt: skip
def test_each_refusal_of_the_references_tls_and_socket_variables(
    reference: dict[str, str],
    files: dict[str, str],
    variables: dict[str, str],
    errors: list[str],
) -> None:
    environ = {**reference}
    for name, value in variables.items():
        environ[name] = value
        for file in ("server.crt", "server.key"):
            environ[name] = environ[name].replace("{" + file + "}", files[file])
    assert errors_of([], environ) == errors
