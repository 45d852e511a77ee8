"""``python -m ratekeeper.cli``: the ``ratekeeper`` command."""

import sys

from ratekeeper.cli.main import main

sys.exit(main())
