import pytest

from ratekeeper.core.wording import agreeing, many


@pytest.mark.parametrize(
    ("count", "thing", "things", "text"),
    [
        (0, "rule", None, "0 rules"),
        (1, "rule", None, "1 rule"),
        (2, "domain", None, "2 domains"),
        (1_000, "key", None, "1,000 keys"),
        (1, "entry", "entries", "1 entry"),
        (3, "entry", "entries", "3 entries"),
    ],
)
def test_many_writes_the_plural_unless_one(
    count: int, thing: str, things: str | None, text: str
) -> None:
    assert many(count, thing, things) == text


@pytest.mark.parametrize(("count", "verb"), [(0, "hold"), (1, "holds"), (2, "hold")])
def test_agreeing_takes_the_verb_of_one_only_for_one(count: int, verb: str) -> None:
    assert agreeing(count, "holds", "hold") == verb
