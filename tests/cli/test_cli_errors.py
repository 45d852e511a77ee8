"""What goes wrong at the command line ends in one line on stderr and a documented status: never
a traceback, never a password, never a store created by a lookup."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ratekeeper.cli import main
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from tests.cli.commandline import run

FIVE = Override(5, 1)


def failed(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a failed command printed on stderr (and nothing on stdout)."""
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and err.endswith("\n")
    return err


def python(*lines: str) -> tuple[int, str, str]:
    """Run ``lines`` in a fresh interpreter: ``(status, stdout, stderr)``."""
    completed = subprocess.run(
        [sys.executable, "-c", "\n".join(lines)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return completed.returncode, completed.stdout, completed.stderr


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(autouse=True)
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in an empty directory, with no store named by the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RATEKEEPER_CONFIG", raising=False)
    return tmp_path


def test_an_empty_key_is_refused_and_nothing_is_created(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["limits", "set", "", "--capacity", "5", "--window", "1"]) == 1
    assert failed(capsys) == "error: override key must be a non-empty string, not ''\n"
    assert list(here.iterdir()) == []


def test_an_import_with_an_empty_key_writes_nothing(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["limits", "set", "kept", "--capacity", "5", "--window", "1"]) == 0
    capsys.readouterr()
    path = here / "overrides.json"
    good = {"time_window_sec": 1, "capacity": 7}
    path.write_text(json.dumps({"a": good, "kept": good, "": good, "z": good}))
    assert main(["limits", "import", str(path)]) == 1
    assert failed(capsys) == (f"error: {path}: override key must be a non-empty string, not ''\n")
    store = open_config_store("sqlite:///ratekeeper.db")
    assert list(store.items()) == [("", "kept", FIVE)]
    store.close()


def test_an_import_file_that_is_not_utf8_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = here / "latin1.json"
    path.write_bytes('{"caf\xe9": {"time_window_sec": 1, "capacity": 5}}'.encode("latin-1"))
    assert main(["limits", "import", str(path)]) == 1
    assert failed(capsys).startswith(f"error: {path}: not UTF-8 text: 'utf-8' codec can't")
    assert not (here / "ratekeeper.db").exists()


def test_an_import_from_stdin_that_is_not_utf8_is_refused(here: Path) -> None:
    status, out, err = run(
        "limits", "import", "-", stdin=b'{"caf\xe9": {"time_window_sec": 1, "capacity": 5}}'
    )
    assert (status, out) == (1, "")
    assert err.startswith("error: <stdin>: not UTF-8 text: ")
    assert len(err.splitlines()) == 1
    assert not (here / "ratekeeper.db").exists()


def test_an_import_from_stdin_with_a_byte_order_mark_is_read(here: Path) -> None:
    stdin = '\ufeff{"café": {"time_window_sec": 1, "capacity": 5}}'.encode()
    status, _, err = run("limits", "import", "-", stdin=stdin)
    assert status == 0, err
    store = open_config_store("sqlite:///ratekeeper.db")
    assert list(store.items()) == [("", "café", FIVE)]
    store.close()


def test_an_import_file_that_is_missing_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["limits", "import", "nope.json"]) == 1
    assert failed(capsys) == "error: nope.json: No such file or directory\n"


def test_an_unknown_scheme_is_a_usage_error_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["limits", "--config", "mysql://admin:hunter2@db.internal/rk", "list"]) == 2
    assert failed(capsys) == (
        "error: --config mysql://admin:***@db.internal/rk: unknown configuration store URL"
        " scheme 'mysql'; expected one of: postgres://, postgresql://, sqlite://\n"
    )


def test_a_malformed_postgres_url_is_a_usage_error_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["limits", "list", "--config", "postgresql://admin:hunter2@[::1/rk"]) == 2
    err = failed(capsys)
    assert err.startswith("error: --config postgresql://admin:***@[::1/rk: bad PostgreSQL URL")
    assert "hunter2" not in err


def test_an_unusable_url_from_the_environment_is_named_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RATEKEEPER_CONFIG", "mysql://admin:hunter2@db.internal/rk")
    assert main(["limits", "get", "k"]) == 2
    assert failed(capsys).startswith(
        "error: $RATEKEEPER_CONFIG mysql://admin:***@db.internal/rk: unknown configuration"
    )


def test_a_store_that_fails_is_reported_without_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    url = f"postgresql://admin:hunter2@127.0.0.1:{port}/rk?password=hunter2&connect_timeout=2"
    for argv in (["limits", "--config", url, "get", "k"], ["limits", "list"]):
        monkeypatch.setenv("RATEKEEPER_CONFIG", url)
        assert main(argv) == 3
        err = failed(capsys)
        assert err.startswith(
            f"error: PostgreSQL configuration store 127.0.0.1:{port}/rk: cannot connect:"
        )
        assert "hunter2" not in err


def test_a_missing_extra_names_the_pip_command() -> None:
    status, out, err = python(
        "import sys; sys.modules['psycopg'] = None",
        "from ratekeeper.cli import main",
        "sys.exit(main(['limits', '--config', 'postgresql://admin:hunter2@127.0.0.1/rk', 'list']))",
    )
    assert (status, out) == (3, "")
    assert err == (
        "error: psycopg is not installed; install it with: pip install 'ratekeeper[postgres]'\n"
    )


def test_validate_without_pyyaml_names_the_pip_command(here: Path) -> None:
    (here / "rules.yaml").write_text("domain: api\ndescriptors: []\n")
    status, out, err = python(
        "import sys; sys.modules['yaml'] = None",
        "from ratekeeper.cli import main",
        "sys.exit(main(['rules', 'validate', 'rules.yaml']))",
    )
    assert (status, out) == (3, "")
    assert err == (
        "error: PyYAML is not installed; install it with: pip install 'ratekeeper[rules]'\n"
    )


def corrupt(path: Path, domain: str, key: str, config: str) -> None:
    """Store ``config`` as ``key``'s override behind the store's back, as plain SQL would."""
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO overrides (domain, key, config, updated_at) VALUES (?, ?, ?, 0)",
            (domain, key, config),
        )
    db.close()


def test_an_invalid_stored_override_is_reported_and_the_listing_goes_on(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_config_store("sqlite:///ratekeeper.db")
    store.set("a", FIVE, "api")
    store.set("c", FIVE, "api")
    store.set("z", FIVE)
    store.close()
    corrupt(here / "ratekeeper.db", "api", "b", '{"capacity": 0, "time_window_sec": 1}')
    corrupt(here / "ratekeeper.db", "", "y", "not json")

    assert main(["limits", "list"]) == 1
    out, err = capsys.readouterr()
    assert [line.split("\t")[:2] for line in out.splitlines()] == [
        ["-", "z"],
        ["api", "a"],
        ["api", "c"],
    ]
    assert err.splitlines() == [
        "error: override 'y': not valid JSON: Expecting value: line 1 column 1 (char 0)",
        "error: override 'b' in domain 'api': capacity must be a positive integer, not 0",
        "3 override(s)",
        "error: 2 stored override(s) are invalid",
    ]

    assert main(["limits", "get", "b", "--domain", "api"]) == 1
    assert failed(capsys) == (
        "error: override 'b' in domain 'api': capacity must be a positive integer, not 0\n"
    )
    assert main(["limits", "delete", "b", "--domain", "api"]) == 0  # the way out
    assert main(["limits", "--domain", "api", "list"]) == 0


@pytest.mark.parametrize(
    "argv", [["list"], ["get", "user:1"], ["delete", "user:1"]], ids=["list", "get", "delete"]
)
def test_lookups_create_no_store(
    argv: list[str], here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["limits", *argv]) == 3
    assert failed(capsys) == (
        "error: SQLite configuration store ratekeeper.db: cannot open: no such file;"
        " 'ratekeeper limits set' or 'ratekeeper limits import' creates it\n"
    )
    assert list(here.iterdir()) == []


def test_a_lookup_in_a_file_that_is_not_a_store_creates_nothing_in_it(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sqlite3.connect(here / "other.db").close()  # an empty SQLite file
    assert main(["limits", "list", "--config", "sqlite:///other.db"]) == 3
    assert failed(capsys) == (
        "error: SQLite configuration store other.db: cannot open:"
        " not a ratekeeper configuration store\n"
    )
    with sqlite3.connect(here / "other.db") as db:
        assert db.execute("SELECT count(*) FROM sqlite_schema").fetchone() == (0,)
    db.close()


def test_store_options_go_before_or_after_the_action(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{here / 'config.db'}"

    def capacity(*argv: str) -> int:
        assert main(["limits", *argv]) == 0
        return int(json.loads(capsys.readouterr().out)["capacity"])

    assert capacity("set", "k", "--capacity", "5", "--window", "1", "--config", url) == 5
    assert capacity("--config", url, "set", "k", "--capacity", "6", "--window", "1",
                    "--domain", "api") == 6  # fmt: skip
    assert capacity("--domain", "api", "get", "k", "--config", url) == 6
    assert capacity("--config", url, "get", "k") == 5
    assert capacity("--domain", "other", "--config", "sqlite:///elsewhere.db",
                    "get", "k", "--domain", "api", "--config", url) == 6  # fmt: skip
    assert main(["limits", "list", "--config", url, "--json", "--domain", "api"]) == 0
    assert [json.loads(line)["key"] for line in capsys.readouterr().out.splitlines()] == ["k"]
    assert sorted(path.name for path in here.iterdir()) == ["config.db"]


def test_a_closed_stdout_ends_a_listing_quietly(here: Path) -> None:
    store = open_config_store("sqlite:///ratekeeper.db")
    store.set_many({f"user:{n}": FIVE for n in range(20_000)})
    store.close()
    listing = subprocess.Popen(
        [sys.executable, "-m", "ratekeeper.cli", "limits", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert listing.stdout is not None and listing.stderr is not None
    assert listing.stdout.readline().startswith(b"-\tuser:0\t")
    listing.stdout.close()  # as `| head -1` does
    err = listing.stderr.read()
    listing.stderr.close()
    assert listing.wait(60) == 1
    assert b"Traceback" not in err
