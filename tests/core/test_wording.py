import pytest

from ratekeeper.core.wording import many


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
