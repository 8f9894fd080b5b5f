# Sourced by site.sh and test.sh: create .venv and install the project into it, once.
# Reinstalls when pyproject.toml changes. Needs Python 3.11+ (set PYTHON to choose one).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"

ensure_venv() {  # $1: the extra to install (book or dev)
  local extra="$1"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "error: Python 3.11+ is needed; set PYTHON=/path/to/python3.11" >&2; exit 1; }
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  local stamp="$VENV/.installed-$extra"
  local want
  want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "==> installing lessons_src[$extra] into .venv (about a minute the first time)"
    local t0=$SECONDS
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
    # torch is pinned (pyproject.toml); on a machine without CUDA this is the CPU wheel.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$extra]" 2>&1 \
      | grep -v '^WARNING: Location' || true
    "$VENV/bin/python" -c 'import lessons_src, torch' \
      || { echo "error: installing into .venv failed (see above)" >&2; exit 1; }
    echo "$want" > "$stamp"
    echo "==> installed in $((SECONDS - t0)) s"
  fi
  export PATH="$VENV/bin:$PATH"
  export VIRTUAL_ENV="$VENV"
}
