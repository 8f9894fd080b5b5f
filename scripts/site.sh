#!/usr/bin/env bash
# Build the course website into _build/html (scripts/book.py: every page executed, except pages
# whose code is unchanged, which come from the execution cache or from the test suite's launch
# stage). Usage: bash scripts/site.sh [--serve [PORT]]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
ensure_venv book
# The pages never depend on the network: chapter "Attention in today's open models" asks the Hugging Face Hub
# for SmolLM2-135M and, offline, runs a course model in its place (CONTRIBUTING.md, "Real checkpoints").
export HF_HUB_OFFLINE=1

t0=$SECONDS
python scripts/book.py build
echo "==> built in $((SECONDS - t0)) s: open $(pwd)/_build/html/index.html"

if [ "${1:-}" = "--serve" ]; then
  port="${2:-8000}"
  echo "==> serving on http://localhost:$port (Ctrl-C to stop)"
  exec python -m http.server --bind 127.0.0.1 --directory _build/html "$port"
else
  echo "    or serve it: bash scripts/site.sh --serve"
fi
