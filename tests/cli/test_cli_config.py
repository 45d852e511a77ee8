"""``ratekeeper rules validate`` (and ``config validate``, its old spelling) and
``ratekeeper limits``, run as an operator would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratekeeper.cli import main
from ratekeeper.config import open_config_store
from ratekeeper.core.overrides import Override
from tests.cli.commandline import run

GOOD = """\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /health
"""
BAD = """\
domain: api
descriptors:
  - key: user
    ratelimit: {unit: minute, requests_per_unit: 5}
"""


def test_validate_accepts_a_good_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(GOOD)
    assert main(["rules", "validate", str(path)]) == 0
    assert capsys.readouterr().out == f"ok: 1 rule in 1 domain from {path}\n"


def test_validate_names_the_file_and_path_of_each_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD.replace("api", "web"))
    bad.write_text(BAD)
    assert main(["rules", "validate", str(good), str(bad)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert (
        err[0]
        == f"{bad}: descriptors[0].ratelimit: unknown key 'ratelimit'; did you mean 'rate_limit'?"
    )
    assert err[-1] == "invalid: 1 error"


def test_validate_reports_a_missing_file(tmp_path: Path) -> None:
    status, out, err = run("rules", "validate", str(tmp_path / "nope.yaml"))
    assert (status, out) == (1, "")
    assert str(tmp_path / "nope.yaml") in err


def test_config_validate_is_rules_validate_with_a_note_on_stderr(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(BAD)
    note = (
        "note: ratekeeper config validate is deprecated and will be removed in 0.3.0: "
        "use ratekeeper rules validate\n"
    )
    for files in ([good], [good, bad], [tmp_path / "nope.yaml"]):
        paths = [str(path) for path in files]
        new = run("rules", "validate", *paths)
        status, out, err = run("config", "validate", *paths)
        assert (status, out) == new[:2], files  # the same exit status and output
        assert err == note + new[2], files  # and one line more, first, on stderr


def test_the_help_names_rules_validate_and_the_old_spelling_as_deprecated() -> None:
    status, out, _ = run("--help")
    assert status == 0
    assert "rules" in out and "deprecated: use 'ratekeeper rules validate'" in out


def test_limits_set_get_list_delete(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'config.db'}"
    status, out, _ = run(
        "limits", "--config", url, "set", "user:241531", "--capacity", "5", "--window", "1"
    )
    assert status == 0
    assert json.loads(out) == {
        "algorithm": "fixed_window",  # no --algorithm: a fixed window, as for a rule
        "capacity": 5,
        "time_window_sec": 1,
    }
    status, out, _ = run(
        "limits",
        "--config",
        url,
        "--domain",
        "api",
        "set",
        "user:7",
        "--capacity",
        "10",
        "--window",
        "5m",
        "--algorithm",
        "token_bucket",
        "--burst",
        "20",
    )
    assert status == 0
    assert json.loads(run("limits", "--config", url, "get", "user:241531")[1])["capacity"] == 5
    assert json.loads(run("limits", "--config", url, "--domain", "api", "get", "user:7")[1]) == {
        "algorithm": "token_bucket",
        "burst": 20,
        "capacity": 10,
        "time_window_sec": 300,
    }
    status, out, err = run("limits", "--config", url, "list")
    assert status == 0
    assert [line.split("\t")[:2] for line in out.splitlines()] == [
        ["-", "user:241531"],
        ["api", "user:7"],
    ]
    assert err == "2 override(s)\n"
    status, out, err = run("limits", "--config", url, "delete", "user:241531")
    assert (status, err) == (0, "deleted user:241531\n")
    status, out, err = run("limits", "--config", url, "get", "user:241531")
    assert (status, out, err) == (1, "", "error: no override for 'user:241531'\n")
    assert run("limits", "--config", url, "delete", "user:241531")[0] == 1


def test_limits_set_rejects_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'config.db'}"
    status, out, err = run(
        "limits",
        "--config",
        url,
        "set",
        "user:1",
        "--capacity",
        "5",
        "--window",
        "1",
        "--algorithm",
        "fixed_window",
        "--burst",
        "3",
    )
    assert (status, out) == (1, "")
    assert err == "error: user:1: burst does not apply to fixed_window\n"
    assert run("limits", "--config", url, "list")[1] == ""


def test_limits_import_is_all_or_nothing_and_shows_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'config.db'}"
    monkeypatch.setenv("RATEKEEPER_CONFIG", url)
    overrides = {f"user:{n}": {"time_window_sec": 60, "capacity": n + 1} for n in range(2_500)}
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**overrides, "user:x": {"capacity": 5}}))
    assert main(["limits", "import", str(broken)]) == 1
    assert "user:x: missing time_window_sec" in capsys.readouterr().err
    store = open_config_store(url)
    assert list(store.items()) == []

    good = tmp_path / "overrides.json"
    good.write_text(json.dumps(overrides))
    assert main(["limits", "import", str(good)]) == 0
    err = capsys.readouterr().err
    assert "\rwriting 1,000/2,500 (" in err  # progress while the one transaction runs
    last = err.rsplit("\r", 1)[1]
    assert last.startswith("imported 2,500/2,500 (") and last.endswith("/s)\n")
    assert sum(1 for _ in store.items()) == 2_500
    assert store.get("user:41") == Override(42, 60)
    store.close()


def test_limits_reports_a_store_it_cannot_open(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "config.db"
    status, out, err = run(
        "limits", "--config", f"sqlite:///{path}", "set", "k", "--capacity", "1", "--window", "1"
    )
    assert (status, out) == (3, "")
    assert err == (
        f"error: SQLite configuration store {path}: cannot open: unable to open database file\n"
    )


def test_validate_refuses_a_directory_without_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "rules.json").write_text("{}")  # not a rule file: skipped
    assert main(["rules", "validate", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"no rules: {tmp_path} holds no *.yaml or *.yml rule file with a rate limit\n"
    )


def test_validate_refuses_directories_without_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir()
    other.mkdir()
    assert main(["rules", "validate", str(one), str(other)]) == 1
    assert capsys.readouterr().err == (
        f"no rules: {one}, {other} hold no *.yaml or *.yml rule file with a rate limit\n"
    )


def test_validate_refuses_a_file_without_a_rate_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("domain: empty\ndescriptors:\n  - key: user\n")
    assert main(["rules", "validate", str(rules)]) == 1
    assert capsys.readouterr().err == f"no rules: {rules} holds no rate limit\n"
