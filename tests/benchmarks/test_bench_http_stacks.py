"""The HTTP stacks benchmark's table and commands, without servers."""

from __future__ import annotations

import pytest
from benchmarks.service import http_stacks
from benchmarks.service.http_stacks import STACKS, Timed


def test_each_stack_is_set_beside_each_hello_world_by_throughput_and_by_cpu() -> None:
    best = {
        "uvicorn hello": Timed(40_000.0, 25.0),
        "granian hello": Timed(20_000.0, 50.0),
        "ratekeeper on uvicorn": Timed(24_000.0, 40.0),
        "ratekeeper on granian": Timed(15_000.0, 62.5),
    }
    rows = {row[0]: row[1:] for row in http_stacks.rows(best)}
    assert list(rows) == list(STACKS)
    assert rows["uvicorn hello"] == ["40,000", "25.0", "1.00x", "1.00x", "2.00x", "2.00x"]
    assert rows["ratekeeper on uvicorn"] == ["24,000", "40.0", "0.60x", "0.62x", "1.20x", "1.25x"]
    assert rows["ratekeeper on granian"] == ["15,000", "62.5", "0.38x", "0.40x", "0.75x", "0.80x"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_has_a_command_that_takes_the_addresses(stack: str) -> None:
    command = http_stacks.command(stack)
    assert command[1] == "-m"
    assert "--http" not in command and "--grpc" not in command  # the Server adds them
    served = {"granian hello": "hello", "ratekeeper on granian": "ratekeeper"}
    if stack in served:
        assert command[2:] == ["benchmarks.service.http_stacks", "--serve", served[stack]]


@pytest.mark.parametrize(
    "argument",
    [["--rounds", "0"], ["--seconds", "-1"], ["--seconds", "nan"], ["--connections", "x"]],
)
def test_a_count_or_length_that_is_not_positive_is_refused_before_any_server_starts(
    argument: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        http_stacks.main(argument)
    assert stopped.value.code == 2
    assert f"argument {argument[0]}: expected a positive number, not '{argument[1]}'" in (
        capsys.readouterr().err
    )
