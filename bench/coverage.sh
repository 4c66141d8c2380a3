#!/usr/bin/env bash
# Line and branch coverage of dcsim/, pages/ and app.py over the whole suite (CI=true, browsers
# included), child processes measured too: Streamlit servers, checkpoint and XLA-check children, the
# documented commands' forks. Issue 42 records it before and after each change to the suite
# (bench/README.md): neither figure may drop.
#
#   bash bench/coverage.sh [PYTEST ARGS...]    # prints the report; data in bench/out/coverage/
#
# The patterns are absolute, so a child that runs in a temporary folder still matches them; a
# command run from a copy of the tree (tests/test_docs.py) is measured where it imports dcsim from,
# the tracked copy, and is not counted here, before or after.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
out="$root/bench/out/coverage"
rm -rf "$out" && mkdir -p "$out"
cat > "$out/rc" <<RC
[run]
branch = true
parallel = true
sigterm = true
patch = subprocess
include =
    $root/dcsim/*
    $root/pages/*
    $root/app.py
data_file = $out/.coverage
RC
export COVERAGE_RCFILE="$out/rc" CI="${CI:-true}"
status=0
python -m coverage run -m pytest -p no:cacheprovider "$@" || status=$?
python -m coverage combine -q
python -m coverage report --precision=2 | tail -n 3
python -m coverage json -q -o "$out/coverage.json"
python - "$out/coverage.json" <<'PY'
import json, sys
totals = json.load(open(sys.argv[1]))["totals"]
print(f"lines {totals['covered_lines']:,} of {totals['num_statements']:,} "
      f"({100 * totals['covered_lines'] / totals['num_statements']:.2f}%); "
      f"branches {totals['covered_branches']:,} of {totals['num_branches']:,} "
      f"({100 * totals['covered_branches'] / totals['num_branches']:.2f}%)")
PY
exit "$status"
