"""The ``ratekeeper`` command: ``serve``, ``validate``, ``limits``, ``simulate`` and ``demo``."""

from ratekeeper.cli.main import main

__all__ = ["main"]
