#!/usr/bin/env bash
# Set up ratekeeper on a fresh Debian machine and run its decision service on the embedded
# defaults: the in-memory request store, the SQLite configuration store (./ratekeeper.db) and
# the example rules shipped with ratekeeper; HTTP on 127.0.0.1:8080, Envoy's gRPC protocol on
# 127.0.0.1:8081. Extra arguments go to `ratekeeper serve` (see `ratekeeper serve --help`).
# Ctrl-C or SIGTERM stops it.
set -euo pipefail
RATEKEEPER_EXTRAS="server"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cat >&2 <<'TRY'
==> starting ratekeeper serve; try, from another terminal:
curl -i http://127.0.0.1:8080/v1/check -H 'Content-Type: application/json' -d '{"key": "user:1", "limit": "3/minute"}'
curl -i http://127.0.0.1:8080/v1/check -H 'Content-Type: application/json' -d '{"domain": "example", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}'
TRY
exec "$VENV/bin/ratekeeper" serve "$@"
