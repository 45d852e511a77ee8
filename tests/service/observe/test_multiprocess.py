"""The workers' metrics read as one: only prometheus_client's own files, and only those that
hold something, so that nothing else in the run's directory (the dashboard's records, the
workers' shared configuration store) and no file a worker has just created can fail a scrape."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from prometheus_client.mmap_dict import MmapedDict, mmap_key

from ratekeeper.service.observe.multiprocess import SharedCollector, metrics_files


def counter_file(path: Path, value: float) -> None:
    """A worker's counter file, as prometheus_client writes it."""
    written = MmapedDict(str(path))
    key = mmap_key("ratekeeper_decisions", "ratekeeper_decisions_total", ["rule"], ["a"], "d")
    written.write_value(key, value, 0.0)
    written.close()


def test_a_scrape_reads_the_metrics_files_alone(tmp_path: Path) -> None:
    counter_file(tmp_path / "counter_101.db", 3.0)
    counter_file(tmp_path / "counter_102.db", 4.0)
    (tmp_path / "counter_103.db").touch()  # created by a starting worker, not yet sized
    with sqlite3.connect(tmp_path / "overrides.db") as store:  # a SQLite file named .db
        store.execute("create table overrides (key text)")
    (tmp_path / "dashboard_101.json").write_text("{}")

    assert sorted(Path(one).name for one in metrics_files(str(tmp_path))) == [
        "counter_101.db",
        "counter_102.db",
    ]
    (family,) = SharedCollector(str(tmp_path), lambda: None).collect()
    assert [(one.name, one.value) for one in family.samples] == [
        ("ratekeeper_decisions_total", 7.0)
    ]
