# Sourced by .ci/run and tests/run.sh: time the parts of a script and print them at the end.
#   timed NAME COMMAND...   run it, keep "NAME: N s", return its status
#   print_timings PREFIX    a line a part, then the total since this file was sourced
started=$(date +%s)
timings=()
timed() {
    local name=$1 begin status=0
    shift
    begin=$(date +%s)
    "$@" || status=$?
    timings+=("$name: $(($(date +%s) - begin)) s")
    return $status
}
print_timings() { printf "$1: %s\n" "${timings[@]}" "total: $(($(date +%s) - started)) s"; }
