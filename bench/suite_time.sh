#!/usr/bin/env bash
# How long the test suite takes on a fresh clone (issue 42): the quick loop and the whole suite
# (CI=true, browsers included), each from a new clone of HEAD with no cache of an earlier run
# (no .pytest_cache, .hypothesis, __pycache__ or XLA cache), wall and CPU seconds.
#
#   bash bench/suite_time.sh [quick|full|both]     # default both; prints one Markdown row each
#
# Wall time on a shared machine swings with its load: the CPU seconds (user + system, every
# process of the run) are the steadier figure, and CPU / cores is what an idle machine would take.
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-both}"
root="$(pwd)"
run() {
    local name="$1"; shift
    local clone
    clone="$(mktemp -d)/dcsim"
    git clone -q "$root" "$clone"
    local log="$clone.log"
    local load
    load="$(cut -d' ' -f1-3 /proc/loadavg)"
    (cd "$clone" && /usr/bin/time -f "%e %U %S" -o "$clone.time" "$@" > "$log" 2>&1) || true
    local summary
    summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$log" | tail -n 1 | tr -d '=')"
    read -r wall user sys < <(tail -n 1 "$clone.time")  # after "Command exited with non-zero status N"
    printf '| %s | %.0f s | %.0f s | %s | load before: %s |\n' "$name" "$wall" "$(awk "BEGIN {print $user + $sys}")" \
        "$summary" "$load"
    grep -E '^(FAILED|ERROR) ' "$log" >&2 || true  # what failed, on stderr beside the row
    rm -rf "$(dirname "$clone")"
}
echo "| run | wall | CPU (user + sys) | result | |"
echo "|---|---|---|---|---|"
if [ "$which" != full ]; then
    run "quick loop" env -u CI python -m pytest -m "not slow and not browser" -p no:cacheprovider -q
fi
if [ "$which" != quick ]; then
    run "whole suite, CI=true" env CI=true python -m pytest -p no:cacheprovider -q
fi
