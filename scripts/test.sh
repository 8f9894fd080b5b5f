#!/usr/bin/env bash
# Run the test suite: the gate (the default, what CI runs) or the full tier, all stages or some.
#
#   bash scripts/test.sh                  the gate: every stage, each page executed once (within 30 minutes)
#   bash scripts/test.sh full             the full tier: every stage, everything today's suite ever checked
#   bash scripts/test.sh [full] STAGE...  only those stages, e.g. `bash scripts/test.sh notebooks site`
#
# The stages (CONTRIBUTING.md, "Two tiers", lists what each checks in each tier and which probe stands in
# for which full check):
#   lint       ruff over the code; every workflow validated against GitHub's schema and audited by zizmor (offline)
#   unit       unit and hygiene tests (pytest -m "not site and not dist and not launch and not frontend and not load")
#   dist       the sdist and wheel built and checked; the wheel installed (not editable) in a fresh venv
#   notebooks  every notebook as Colab runs it: alone in an empty folder, the package installed by its own
#              install cell from a local clone, nbval, solutions strict; each executed notebook kept in
#              _build/launch/ for the site stage. Gate: once, on Colab's ipywidgets 7.7.1, plus the widget
#              probe (every chapter's slider figure in one notebook). Full: on ipywidgets 7.7.1 and 8.
#   site       the site built with -W from the kept executions (no page executed again), the browser tests on
#              two workers (one visit per page at desktop width: console, maths, sliders, axe; one at 390 px). Full: also
#              every page's printed text compared between its two executions.
#   frontend   Binder's environment with real JupyterLab, driven by Chromium. Gate: the widget probe run and
#              every slider moved. Full: also every chapter run and its sliders moved.
#   load       with one busy process per core: the checks' contract test, learner table and the timing helpers.
#              Full: also every page that measures time run as Colab runs it (ipywidgets 7.7.1 and 8).
# Extra pytest options: PYTEST_ADDOPTS="...". Each stage's time is printed; benchmarks/bench_gate.py times a run.
set -euo pipefail
cd "$(dirname "$0")/.."
setup_t0=$SECONDS
source scripts/_venv.sh
ensure_venv dev

tier=gate
if [ "${1:-}" = full ] || [ "${1:-}" = gate ]; then tier=$1; shift; fi
export LESSONS_TEST_TIER=$tier  # read by the tests (tests/launch_env.py)
# The pages never depend on the network: chapter "Attention in today's open models" asks the Hugging Face Hub
# for SmolLM2-135M and, offline, runs a course model in its place (CONTRIBUTING.md, "Real checkpoints").
export HF_HUB_OFFLINE=1
USER_PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-}"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(lint unit dist notebooks site frontend load)
echo "==> tier: $tier; stages: ${stages[*]}"

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

# Each stage's time, and a JUnit report of each pytest stage (the tests' own times), for the benchmark
# (benchmarks/bench_gate.py) and for CI's artifacts.
REPORTS="$PWD/_build/test-reports"  # absolute: pytest runs inside pytest (nbval) start elsewhere
mkdir -p "$REPORTS"
echo "setup $((SECONDS - setup_t0)) ok $tier" > "$REPORTS/stages.txt"  # this run's stages only
echo "==> setup ($((SECONDS - setup_t0)) s)"

status=0
run_stage() {
  local t0=$SECONDS ok=0
  echo; echo "==> $1"
  export PYTEST_ADDOPTS="${USER_PYTEST_ADDOPTS:-} --junitxml=$REPORTS/$1.xml -o junit_duration_report=call"
  case "$1" in
    lint) ruff check lessons_src tests scripts benchmarks book/_ext || ok=1; check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml || ok=1; zizmor --offline --strict-collection --min-severity high .github/workflows || ok=1 ;;
    unit) pytest -q -m "not site and not dist and not launch and not frontend and not load" || ok=1 ;;
    dist) pytest -q -m dist || ok=1 ;;
    notebooks) pytest -q -m launch -n 2 || ok=1 ;;  # two xdist workers (tests/test_launch.py)
    site) pytest -q -m site -n 2 || ok=1 ;;  # two xdist workers: the browser tests; one builds the site, the other waits
    load) pytest -q -m load -rP || ok=1 ;;  # one worker: the busy processes take the other cores
    frontend) pytest -q -m frontend || ok=1 ;;
    *) echo "unknown stage '$1' (lint, unit, dist, notebooks, load, site, frontend)" >&2; ok=1 ;;
  esac
  if [ $ok = 0 ]; then echo "    ok ($((SECONDS - t0)) s)"; else echo "    FAILED ($((SECONDS - t0)) s)"; status=1; fi
  echo "$1 $((SECONDS - t0)) $([ $ok = 0 ] && echo ok || echo FAILED) $tier" >> "$REPORTS/stages.txt"
}

for stage in "${stages[@]}"; do run_stage "$stage"; done

echo
if [ $status = 0 ]; then echo "==> all stages passed ($tier): ${stages[*]}"; else echo "==> some stages FAILED ($tier)"; fi
exit $status
