#!/usr/bin/env bash
# Set up ratekeeper on a fresh Debian machine and run its decision service on the embedded
# defaults: the in-memory request store, the SQLite configuration store (./ratekeeper.db) and
# the example rules shipped with ratekeeper; HTTP on 127.0.0.1:8080, Envoy's gRPC protocol on
# 127.0.0.1:8081, with the live dashboard at /dashboard behind an admin token made for the run
# (or RATEKEEPER_ADMIN_TOKEN). Extra arguments go to `ratekeeper serve` (see `ratekeeper serve
# --help`), and the lines printed to try it use the HTTP address they (or RATEKEEPER_HTTP) give.
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
# Where HTTP will answer, as the service reads it: from these arguments (--http), else
# $RATEKEEPER_HTTP, else 127.0.0.1:8080; a wildcard host is reached on loopback. Nothing when the
# settings are wrong (then 'ratekeeper serve' says why) or help is asked for.
HTTP="$("$VENV/bin/python" - "$@" 2>/dev/null <<'PY' || true
import argparse
import sys

from ratekeeper.service.runtime.settings import ListenAddress, Settings, add_arguments

parser = argparse.ArgumentParser(add_help=False)
add_arguments(parser)
args, _ = parser.parse_known_args()
if {"-h", "--help"} & set(sys.argv[1:]):
    sys.exit(1)
http = Settings.read(args).http
print(ListenAddress({"0.0.0.0": "127.0.0.1", "::": "::1"}.get(http.host, http.host), http.port))
PY
)"
if [ -n "$HTTP" ]; then
  cat >&2 <<TRY
==> starting ratekeeper serve; try, from another terminal:
curl -i http://$HTTP/v1/check -H 'Content-Type: application/json' -d '{"key": "user:1", "limit": "3/minute"}'
curl -i http://$HTTP/v1/check -H 'Content-Type: application/json' -d '{"domain": "example", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}'
==> the live dashboard, in a browser (this run's admin token signs you in):
http://$HTTP/dashboard?token=${RATEKEEPER_ADMIN_TOKEN}
TRY
fi
exec "$VENV/bin/ratekeeper" serve "$@"
