#!/usr/bin/env bash
# Run the whole test suite: lint, unit tests, every notebook re-executed by nbval (solutions under
# LESSONS_SRC_STRICT=1), the exercise stubs shown to fail, the site built with -W, and the
# browser tests against the built site. Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
ensure_venv dev

# The browser tests drive Debian's Chromium (Playwright cannot download browsers here).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> installing Debian's chromium for the browser tests"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium" >&2
  else
    echo "warning: /usr/bin/chromium is missing; install it (apt-get install chromium) for the browser tests" >&2
  fi
fi

status=0
step() {  # run one stage, remember failure, keep going so every stage reports
  echo; echo "==> $1"; shift
  local t0=$SECONDS
  if "$@"; then echo "    ok ($((SECONDS - t0)) s)"; else echo "    FAILED ($((SECONDS - t0)) s)"; status=1; fi
}

step "lint (ruff)" ruff check lessons_src tests scripts benchmarks
step "unit and hygiene tests" pytest -q -m "not site" "$@"
step "nbval: chapters and exercises" pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env book exercises
step "nbval: solutions under LESSONS_SRC_STRICT=1" env LESSONS_SRC_STRICT=1 \
  pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env solutions
step "site build (-W) and browser tests" pytest -q -m site "$@"

echo
if [ $status = 0 ]; then echo "==> all stages passed"; else echo "==> some stages FAILED"; fi
exit $status
