#!/usr/bin/env bash
# Run the whole test suite, or some of its stages:
#   lint       ruff over the code; every workflow validated against GitHub's schema and audited by zizmor (offline)
#   unit       unit and hygiene tests (pytest -m "not site and not dist and not launch and not frontend")
#   dist       the sdist and wheel built and checked; the wheel installed (not editable) in a fresh venv
#   notebooks  every notebook as Colab runs it: alone in an empty folder, the package installed by its
#              own install cell from a local clone, nbval, on ipywidgets 7.7.1 and 8 (solutions strict);
#              each executed notebook is kept in _build/launch/ for the site stage
#   site       the site built with -W (from the kept executions where they match), two executions
#              of every page compared, the browser tests
#   frontend   Binder's environment with real JupyterLab, driven by Chromium: run every chapter, move every slider
#   load       with one busy process per core: every page that measures time run as Colab runs it
#              (ipywidgets 7.7.1 and 8), the checks' contract test and learner table (last: it loads the machine)
# Usage: bash scripts/test.sh [STAGE ...]     (extra pytest options: PYTEST_ADDOPTS="...")
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
ensure_venv dev

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(lint unit dist notebooks site frontend load)

# Install a Debian package a stage needs (as root, or with sudo), or say how to: apt_install PACKAGE WHY
apt_install() {
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "warning: $1 is missing; install it (apt-get install $1) for $2" >&2
      return
    fi
    sudo=(sudo)
  fi
  echo "==> installing Debian's $1 for $2"
  ("${sudo[@]}" apt-get update -qq && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null) \
    || echo "warning: could not install $1" >&2
}

# The browser tests drive Debian's Chromium (Playwright cannot download browsers here).
if [[ " ${stages[*]} " =~ " "(site|frontend)" " ]] && [ ! -x /usr/bin/chromium ]; then
  apt_install chromium "the browser tests"
fi
# The accessibility audit (tests/axe.py) runs axe-core, fetched from the npm registry by npm.
if [[ " ${stages[*]} " =~ " site " ]] && ! command -v npm >/dev/null; then
  apt_install npm "the accessibility audit (axe-core)"
fi

status=0
run_stage() {
  local t0=$SECONDS ok=0
  echo; echo "==> $1"
  case "$1" in
    lint) ruff check lessons_src tests scripts benchmarks book/_ext || ok=1; check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml || ok=1; zizmor --offline --strict-collection --min-severity high .github/workflows || ok=1 ;;
    unit) pytest -q -m "not site and not dist and not launch and not frontend and not load" || ok=1 ;;
    dist) pytest -q -m dist || ok=1 ;;
    notebooks) pytest -q -m launch -n 2 || ok=1 ;;  # two xdist workers (tests/test_launch.py)
    site) pytest -q -m site || ok=1 ;;
    load) pytest -q -m load -rP || ok=1 ;;  # one worker: the busy processes take the other cores
    frontend) pytest -q -m frontend || ok=1 ;;
    *) echo "unknown stage '$1' (lint, unit, dist, notebooks, load, site, frontend)" >&2; ok=1 ;;
  esac
  if [ $ok = 0 ]; then echo "    ok ($((SECONDS - t0)) s)"; else echo "    FAILED ($((SECONDS - t0)) s)"; status=1; fi
}

for stage in "${stages[@]}"; do run_stage "$stage"; done

echo
if [ $status = 0 ]; then echo "==> all stages passed: ${stages[*]}"; else echo "==> some stages FAILED"; fi
exit $status
