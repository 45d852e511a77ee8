#!/usr/bin/env bash
# Set up ratekeeper on a fresh Debian machine and run its decision service on the embedded
# defaults: the in-memory request store, the SQLite configuration store (./ratekeeper.db) and
# the example rules shipped with ratekeeper; HTTP on 127.0.0.1:8080, Envoy's gRPC protocol on
# 127.0.0.1:8081, with the live dashboard at /dashboard behind an admin token made for the run
# (or RATEKEEPER_ADMIN_TOKEN). Extra arguments go to `ratekeeper serve` (see `ratekeeper serve
# --help`).
# Ctrl-C or SIGTERM stops it.
set -euo pipefail
RATEKEEPER_EXTRAS="server"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# The live dashboard needs the admin token: a fresh one for this run, unless one is given.
if [ -z "${RATEKEEPER_ADMIN_TOKEN:-}" ]; then
  RATEKEEPER_ADMIN_TOKEN="$("$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))')"
  export RATEKEEPER_ADMIN_TOKEN
fi
export RATEKEEPER_DASHBOARD="${RATEKEEPER_DASHBOARD:-true}"
cat >&2 <<TRY
==> starting ratekeeper serve; try, from another terminal:
curl -i http://127.0.0.1:8080/v1/check -H 'Content-Type: application/json' -d '{"key": "user:1", "limit": "3/minute"}'
curl -i http://127.0.0.1:8080/v1/check -H 'Content-Type: application/json' -d '{"domain": "example", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}'
==> the live dashboard, in a browser (this run's admin token signs you in):
http://127.0.0.1:8080/dashboard?token=${RATEKEEPER_ADMIN_TOKEN}
TRY
exec "$VENV/bin/ratekeeper" serve "$@"
