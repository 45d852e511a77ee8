# Sourced by scripts/test.sh and scripts/demo.sh: make sure Python >= 3.11 with venv is here,
# and that .venv holds ratekeeper with the extras named in $RATEKEEPER_EXTRAS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

say() { printf '==> %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=0
apt_install() {
  # apt_install PACKAGE...: install Debian packages, updating the index once.
  if [ "$APT_UPDATED" -eq 0 ]; then
    say "apt-get update"
    as_root apt-get update -qq
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

find_python() {
  for candidate in python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

PYTHON="$(find_python || true)"
if [ -z "$PYTHON" ]; then
  apt_install python3 python3-venv python3-pip
  PYTHON="$(find_python)" || { say "ratekeeper needs Python >= 3.11"; exit 1; }
fi
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  apt_install python3-venv
fi

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
fi

EXTRAS="${RATEKEEPER_EXTRAS:-}"
STAMP="$VENV/.installed-${EXTRAS//,/-}"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  say "installing ratekeeper${EXTRAS:+[$EXTRAS]} into $VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
  touch "$STAMP"
fi
