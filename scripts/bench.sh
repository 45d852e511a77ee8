#!/usr/bin/env bash
# Set up what the benchmarks need on a fresh Debian machine (Python, .venv with the server and
# bench extras, redis-server; for --service the load generators wrk and h2load, and nghttp),
# then run them: extra arguments go to 'python -m benchmarks' (e.g. --service, --redis, --quick).
set -euo pipefail
RATEKEEPER_EXTRAS="server,bench,redis"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"

if ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server
fi
# wrk drives HTTP; h2load (nghttp2-client, which brings nghttp too) drives gRPC over HTTP/2.
if ! command -v wrk >/dev/null 2>&1; then
  apt_install wrk
fi
if ! command -v h2load >/dev/null 2>&1 || ! command -v nghttp >/dev/null 2>&1; then
  apt_install nghttp2-client
fi

exec "$VENV/bin/python" -m benchmarks "$@"
