#!/usr/bin/env bash
# The tests, on a fresh machine or a used one: installs what the suite needs where it is missing, starts a
# throwaway PostgreSQL and Slurm on 127.0.0.1, runs the tests, stops both, and prints each part's time.
#
#   bash tests/run.sh              # the default suite: the developer's inner loop (about 7 minutes on 2 cores)
#   bash tests/run.sh --long       # the default suite, then the long end-to-end runs
#   bash tests/run.sh --long-only  # the long end-to-end runs alone (.ci/run's call after the default suite)
#   bash tests/run.sh --release    # the real-scale checks before a record or a release (bench/release_check.sh)
#   bash tests/run.sh --setup      # only install what is missing (.ci/run's first part)
#   bash tests/run.sh -- -k store  # pytest's own options after --, for the default suite
#
# What it installs, each only when missing: the dev lock into .venv (requirements/install.sh --dev: the package,
# torch's CPU build, pytest, lint, lm-eval, the SmolLM2 weights), and Debian's chromium (the web view's browser
# test), golang-go with golang-golang-x-mod-dev (the Go cross-check of the signed heads), postgresql (the store's
# second backend) and slurmctld, slurmd, slurm-client and munge (the Slurm executor). The Debian packages need
# root; as another user it names the one command that installs them and exits 2.
# Exit codes: 0 every test passed; 1 a test failed; 2 the set-up failed (it says what and how to mend it).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=default
pytest_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --long) mode=long ;;
        --long-only) mode=long-only ;;
        --release) mode=release ;;
        --setup) mode=setup ;;
        -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; pytest_args=("$@"); break ;;
        *) echo "tests/run.sh: unknown option $1 (use --long, --long-only, --release, --setup or -- PYTEST_OPTIONS)" >&2; exit 2 ;;
    esac
    shift
done

source .ci/timed.sh
fail_setup() { echo "tests/run.sh: $*" >&2; exit 2; }

# The lock's own digest marks what .venv holds, so a lock that moved is installed again.
install_lock() {
    local stamp=.venv/.dev-lock.sha256 want
    want=$(cat requirements/dev.lock requirements/smollm2.lock requirements/uv.txt pyproject.toml | sha256sum | cut -d" " -f1)
    if [[ -x .venv/bin/python && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    echo "tests/run.sh: installing requirements/dev.lock into .venv" >&2
    bash requirements/install.sh --dev || fail_setup "bash requirements/install.sh --dev failed (its message is above)"
    echo "$want" >"$stamp"
}

missing_debian_packages() {
    local missing=()
    command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
    command -v go >/dev/null || missing+=(golang-go)
    [[ -d /usr/share/gocode/src/golang.org/x/mod/sumdb/note ]] || missing+=(golang-golang-x-mod-dev)
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || missing+=(postgresql)
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null || missing+=(munge)
    echo "${missing[@]}"
}

install_debian_packages() {
    local missing
    missing=$(missing_debian_packages)
    [[ -z "$missing" ]] && return 0
    if [[ $(id -u) -ne 0 ]]; then
        fail_setup "missing Debian packages: $missing; install them with: sudo apt-get install -y --no-install-recommends $missing"
    fi
    echo "tests/run.sh: installing $missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086  # one word a package
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >/tmp/ledger-tests-apt.log 2>&1 ||
        fail_setup "apt-get install $missing failed: see /tmp/ledger-tests-apt.log"
}

setup() {  # the Debian packages first: as another user a missing one is said before a minute of installing
    install_debian_packages
    install_lock
}

stop_services() {
    [[ -n "${LEDGER_TEST_POSTGRES_DATA:-}" ]] && bash .ci/postgres.sh --stop "$LEDGER_TEST_POSTGRES_DATA" || true
    [[ -n "${LEDGER_TEST_SLURM_DIR:-}" ]] && bash .ci/slurm.sh --stop "$LEDGER_TEST_SLURM_DIR" || true
}
start_services() {
    local env
    trap stop_services EXIT
    env=$(bash .ci/postgres.sh) || fail_setup "the throwaway PostgreSQL did not start (its log is above)"
    eval "$env"
    env=$(bash .ci/slurm.sh) || fail_setup "the throwaway Slurm cluster did not start (its log is above)"
    eval "$env"
}

# Two workers, one per core of the reference machine; a file stays on one worker (its fixtures are shared).
pytest=(.venv/bin/python -m pytest -q -n 2 --dist loadfile)

timed setup setup
if [[ $mode == setup ]]; then
    print_timings tests/run.sh
    exit 0
fi
timed services start_services

status=0
case $mode in
    default)
        timed "default suite" "${pytest[@]}" --durations=15 "${pytest_args[@]}" || status=$?
        ;;
    long)
        timed "default suite" "${pytest[@]}" --durations=15 || status=$?
        timed "long call" "${pytest[@]}" -m long --durations=30 || status=$?
        ;;
    long-only)
        timed "long call" "${pytest[@]}" -m long --durations=30 || status=$?
        ;;
    release)  # one at a time: each builds models of a billion parameters and keeps under a 15 GiB ceiling
        timed "release checks" .venv/bin/python -m pytest -q -s -m release --durations=0 "${pytest_args[@]}" || status=$?
        ;;
esac
print_timings tests/run.sh
# pytest's 5 (nothing collected) is a failure here: a call that ran no test checked nothing.
[[ $status -eq 0 ]] && exit 0
[[ $status -eq 5 ]] && echo "tests/run.sh: pytest collected no test" >&2
exit 1
