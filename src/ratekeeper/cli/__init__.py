"""The ``ratekeeper`` command: ``serve``, ``rules validate``, ``limits``, ``simulate`` and
``demo``."""

from ratekeeper.cli.main import main

__all__ = ["main"]
