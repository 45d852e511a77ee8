"""The image, built once for the session (and kept, tagged by what it is made of)."""

from __future__ import annotations

import pytest

from tests.container.images import build_image


@pytest.fixture(scope="session")
def image() -> str:
    return build_image()
