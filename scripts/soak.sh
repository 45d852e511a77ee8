#!/usr/bin/env bash
# Set up what the soak run needs on a fresh Debian machine (Python, .venv with the server,
# bench and redis extras, redis-server, wrk), then run it: extra arguments go to
# 'python -m benchmarks.soak' (e.g. --minutes 5 --keys 200000 --output DIR). 30 minutes by
# default; it exits 1 if a Redis key has no TTL or a worker's memory grows after the warm-up.
set -euo pipefail
RATEKEEPER_EXTRAS="server,bench,redis"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"

if ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server
fi
if ! command -v wrk >/dev/null 2>&1; then
  apt_install wrk
fi

exec "$VENV/bin/python" -m benchmarks.soak "$@"
