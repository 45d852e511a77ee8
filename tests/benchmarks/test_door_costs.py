"""``python -m benchmarks.service.door_costs`` runs, each door answering the decision meant,
and prints a row for every part and a column for every door (its figures are not checked:
no timed assertion)."""

from __future__ import annotations

import pytest
from benchmarks.service import door_costs


def test_the_door_costs_table_has_every_part_of_every_door(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert door_costs.main(["--calls", "20", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("| µs a call"))
    assert all(door in header for door in door_costs.DOORS)
    for part in door_costs.ROWS:
        row = next(line for line in lines if line.startswith(f"| {part} "))
        cells = [cell.strip() for cell in row.strip("|").split("|")[1:]]
        assert len(cells) == len(door_costs.DOORS)
        for cell in cells:
            if cell != "—":
                float(cell)  # a figure, whatever it is
