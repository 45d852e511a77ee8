#!/usr/bin/env bash
# Set up ratekeeper on a fresh Debian machine and show live decisions on its embedded
# defaults (the in-memory store). Extra arguments go to `ratekeeper demo`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$VENV/bin/ratekeeper" demo "$@"
