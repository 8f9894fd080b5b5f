#!/usr/bin/env bash
# Run the whole test suite, or some of its stages:
#   lint       ruff over the package, tests, scripts and benchmarks
#   unit       unit and hygiene tests (pytest -m "not site")
#   notebooks  nbval re-executes every notebook in book/ and exercises/
#   solutions  nbval over solutions/ with LESSONS_SRC_STRICT=1 (a failing check raises)
#   site       the site built with -W, two executions of every page compared, the browser tests
# Usage: bash scripts/test.sh [STAGE ...]     (extra pytest options: PYTEST_ADDOPTS="...")
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
ensure_venv dev

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(lint unit notebooks solutions site)

# The browser tests drive Debian's Chromium (Playwright cannot download browsers here).
if [[ " ${stages[*]} " == *" site "* ]] && [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> installing Debian's chromium for the browser tests"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium" >&2
  elif command -v sudo >/dev/null; then
    (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium" >&2
  else
    echo "warning: /usr/bin/chromium is missing; install it (apt-get install chromium) for the browser tests" >&2
  fi
fi

NBVAL=(pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-cell-timeout=300)
status=0
run_stage() {
  local t0=$SECONDS ok=0
  echo; echo "==> $1"
  case "$1" in
    lint) ruff check lessons_src tests scripts benchmarks book/_ext || ok=1 ;;
    unit) pytest -q -m "not site" || ok=1 ;;
    notebooks) "${NBVAL[@]}" book exercises || ok=1 ;;
    solutions) LESSONS_SRC_STRICT=1 "${NBVAL[@]}" solutions || ok=1 ;;
    site) pytest -q -m site || ok=1 ;;
    *) echo "unknown stage '$1' (lint, unit, notebooks, solutions, site)" >&2; ok=1 ;;
  esac
  if [ $ok = 0 ]; then echo "    ok ($((SECONDS - t0)) s)"; else echo "    FAILED ($((SECONDS - t0)) s)"; status=1; fi
}

for stage in "${stages[@]}"; do run_stage "$stage"; done

echo
if [ $status = 0 ]; then echo "==> all stages passed: ${stages[*]}"; else echo "==> some stages FAILED"; fi
exit $status
