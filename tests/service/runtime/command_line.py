"""The service's settings as ``ratekeeper serve`` reads them from a command line."""

from __future__ import annotations

import argparse

from ratekeeper.service.runtime.settings import Settings, add_arguments


def read(argv: list[str], environ: dict[str, str] | None = None) -> Settings:
    """The settings of the flags ``argv`` over ``environ`` (none by default)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return Settings.read(parser.parse_args(argv), environ or {})
