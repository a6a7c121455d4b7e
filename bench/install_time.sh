#!/usr/bin/env bash
# Install time of the first command's install, side by side in one run: the unpinned pip install it
# replaced, the lock installed by pip, and the lock installed by uv (requirements/install.sh's way),
# each into a new venv, first with empty caches ("cold"), then again with the caches they filled ("warm").
#
#   bash bench/install_time.sh          # prints one line per install: seconds and exit code
#   bash bench/install_time.sh --small  # the suite's: the lock by uv once, from the caches already here (seconds)
set -euo pipefail
small=false
case "${1:-}" in
    "") ;;
    --small) small=true ;;
    *) echo "install_time.sh: unknown option ${1} (use --small or nothing)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/install-time.XXXXXX")
trap 'rm -rf "$work"' EXIT
find_links=()
for folder in $(python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u); do
    find_links+=(--find-links "$folder")
done

timed() {  # seconds and exit code of a command, its output in $work/last.log
    local start end rc=0
    start=$(date +%s.%N)
    "$@" >"$work/last.log" 2>&1 || rc=$?
    end=$(date +%s.%N)
    printf '%6.1f s  rc=%d' "$(echo "$end - $start" | bc)" "$rc"
}

if $small; then  # one install the way requirements/install.sh does it, with the caches it already filled
    rm -rf "$work/v3" && python3 -m venv "$work/v3"
    echo "lock with uv   small: $(timed bash -c "
        '$work/v3/bin/pip' install -qq --no-compile --no-deps --require-hashes -r requirements/uv.txt &&
        '$work/v3/bin/uv' pip install --python '$work/v3/bin/python' ${find_links[*]} --no-deps --require-hashes -r requirements/cpu.lock &&
        '$work/v3/bin/uv' pip install --python '$work/v3/bin/python' --no-deps --no-build-isolation -e . &&
        '$work/v3/bin/python' -c 'import ledger, torch'")"
    exit 0
fi
for round in cold warm; do
    rm -rf "$work/v1" && python3 -m venv "$work/v1"
    echo "unpinned pip   $round: $(PIP_CACHE_DIR=$work/pip-unpinned timed "$work/v1/bin/pip" install --no-compile -e '.[models]')"
    rm -rf "$work/v2" && python3 -m venv "$work/v2"
    echo "lock with pip  $round: $(PIP_CACHE_DIR=$work/pip-lock timed bash -c "
        '$work/v2/bin/pip' install --no-compile --no-deps --require-hashes -r requirements/cpu.lock &&
        '$work/v2/bin/pip' install --no-compile --no-deps --no-build-isolation -e .")"
    rm -rf "$work/v3" && python3 -m venv "$work/v3"
    echo "lock with uv   $round: $(PIP_CACHE_DIR=$work/pip-uv UV_CACHE_DIR=$work/uv timed bash -c "
        '$work/v3/bin/pip' install -qq --no-compile --no-deps --require-hashes -r requirements/uv.txt &&
        '$work/v3/bin/uv' pip install --python '$work/v3/bin/python' ${find_links[*]} --no-deps --require-hashes -r requirements/cpu.lock &&
        '$work/v3/bin/uv' pip install --python '$work/v3/bin/python' --no-deps --no-build-isolation -e .")"
done
