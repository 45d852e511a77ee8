"""Rule files hot-reload under a running engine; a broken file leaves the old rules in force."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from ratekeeper import Limit
from ratekeeper.core.errors import ConfigError
from ratekeeper.engine import Engine
from tests.servers import wait_until

RULES = """\
domain: api
descriptors:
  - key: user
    rate_limit: {{unit: minute, requests_per_unit: {amount}}}
"""
BROKEN = """\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: fortnight, requests_per_unit: 5}
"""


def replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` the way editors and config managers do: a new file, renamed."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def limit_of(engine: Engine) -> Limit | None:
    return engine.check("api", [[("user", "alice")]], hits=0).statuses[0].limit


def test_a_replaced_file_applies_and_a_broken_one_keeps_the_old_rules(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES.format(amount=5))
    engine = Engine(rules=path, reload_interval=0.05)
    try:
        assert limit_of(engine) == Limit(5, 60)
        replace(path, RULES.format(amount=7))
        wait_until(lambda: limit_of(engine) == Limit(7, 60), 5.0, "the new rules")
        assert engine.watcher.reloads == 1

        with caplog.at_level(logging.ERROR, logger="ratekeeper.rules"):
            replace(path, BROKEN)
            wait_until(lambda: engine.watcher.errors == 1, 5.0, "the failed reload")
        assert limit_of(engine) == Limit(7, 60)
        assert engine.watcher.last_error is not None
        assert engine.watcher.last_error.startswith(f"{path}: descriptors[0].rate_limit.unit")
        assert "previous rules stay in force" in caplog.text

        replace(path, RULES.format(amount=9))
        wait_until(lambda: limit_of(engine) == Limit(9, 60), 5.0, "the repaired rules")
        assert (engine.watcher.reloads, engine.watcher.errors) == (2, 1)
    finally:
        engine.close()


def test_a_directory_of_rule_files_reloads_when_a_file_appears(tmp_path: Path) -> None:
    (tmp_path / "api.yaml").write_text(RULES.format(amount=5))
    engine = Engine(rules=tmp_path, reload_interval=None)
    try:
        assert engine.check("web", [[("user", "alice")]]).statuses[0].limit is None
        (tmp_path / "web.yaml").write_text(RULES.format(amount=3).replace("api", "web"))
        assert engine.reload()
        assert engine.check("web", [[("user", "alice")]]).statuses[0].limit == Limit(3, 60)
        assert not engine.reload()  # nothing changed since
    finally:
        engine.close()


def test_a_broken_file_at_start_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(BROKEN)
    with pytest.raises(ConfigError) as raised:
        Engine(rules=path)
    assert raised.value.errors[0].startswith(f"{path}: descriptors[0].rate_limit.unit")


def test_a_reload_to_no_rules_keeps_the_old_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A symlink swapped to a version whose files are not rule files is refused, as a broken
    file is; once rules are back, reloads apply again."""
    for version, name in (("v1", "rules.yaml"), ("v2", "rules.json"), ("v3", "rules.yml")):
        (tmp_path / version).mkdir()
        (tmp_path / version / name).write_text(RULES.format(amount=len(version) + int(version[1])))
    current = tmp_path / "current"
    current.symlink_to(tmp_path / "v1")
    engine = Engine(rules=current, reload_interval=None)
    try:
        assert limit_of(engine) == Limit(3, 60)

        def swap(version: str) -> None:
            link = tmp_path / "next"
            link.symlink_to(tmp_path / version)
            os.replace(link, current)

        swap("v2")
        with caplog.at_level(logging.ERROR, logger="ratekeeper.rules"):
            assert engine.reload() is False
        assert (engine.watcher.errors, engine.watcher.reloads) == (1, 0)
        assert engine.watcher.last_error == (
            f"{current}: no rule files, or no rules in them, where 1 rule was loaded: an "
            "emptied rule directory is refused, as it would let every request through"
        )
        assert "previous rules stay in force" in caplog.text
        assert limit_of(engine) == Limit(3, 60)

        swap("v3")
        assert engine.reload() is True
        assert limit_of(engine) == Limit(5, 60)
    finally:
        engine.close()


def test_an_engine_started_without_rules_may_reload_to_none(tmp_path: Path) -> None:
    engine = Engine(rules=tmp_path, reload_interval=None)
    try:
        (tmp_path / "rules.yaml").write_text("domain: api\ndescriptors:\n  - key: user\n")
        assert engine.reload() is True
        assert len(engine.rules) == 0
        assert engine.watcher.errors == 0
    finally:
        engine.close()


def test_a_write_in_place_that_keeps_size_and_mtime_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES.format(amount=5))
    engine = Engine(rules=path, reload_interval=None)
    try:
        assert limit_of(engine) == Limit(5, 60)
        before = path.stat()
        probe = tmp_path / "probe"  # the clock of change times is coarse: wait for its next tick
        while probe.touch() or probe.stat().st_ctime_ns <= before.st_ctime_ns:
            pass
        with path.open("r+") as file:  # same inode, same size
            file.write(RULES.format(amount=7))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # touch -r
        after = path.stat()
        assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
            before.st_size,
            before.st_mtime_ns,
            before.st_ino,
        )
        assert engine.reload() is True
        assert limit_of(engine) == Limit(7, 60)
    finally:
        engine.close()
