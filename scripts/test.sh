#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian machine, then run the whole suite:
# lint, types and tests. Extra arguments go to pytest.
set -euo pipefail
RATEKEEPER_EXTRAS="dev"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"

say "ruff"
"$VENV/bin/ruff" check src tests benchmarks
"$VENV/bin/ruff" format --check --quiet src tests benchmarks
say "mypy"
"$VENV/bin/mypy"
say "pytest"
"$VENV/bin/pytest" "$@"
