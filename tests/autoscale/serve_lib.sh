# Shared by the serve tests (sourced: `source serve_lib.sh BUILD_DIR NAME`): the programs, a work
# directory with edprun's TMPDIR inside (checked empty at the end), the controller's root, fail()
# with the controller's log, and a cleanup on exit that kills what the test started (the
# controller, and every process of the jobs under the root) and removes the work directory.
build=$1
as="$build/tools/edp-autoscale/edp-autoscale"
cnn="$build/examples/fashion_mnist_cnn"
if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# Every step of the jobs lasts at least this long (the controller, edprun and the ranks inherit
# it): a job's shortest run is then fixed, so the controller's decisions land while it runs
# however fast the machine trains (docs/elastic.md, "Pacing").
export EDP_MIN_STEP_MS=${EDP_MIN_STEP_MS:-40}
# Waits (bounded) until the command succeeds: wait_for SECONDS WHAT COMMAND...
wait_for() {
  local secs=$1 what=$2; shift 2
  for _ in $(seq 1 $((secs * 10))); do
    "$@" && return 0
    [[ -z "$serve_pid" ]] || kill -0 "$serve_pid" 2>/dev/null || fail "the controller died while waiting for $what"
    sleep 0.1
  done
  fail "timed out after $secs s waiting for $what"
}
work=$(mktemp -d "/tmp/edp-$2-test.XXXXXX")
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
root="$work/root"
serve_pid=""
fail() { echo "FAIL: $*" >&2; echo "--- controller log:" >&2; cat "$work"/serve*.log >&2 || true; exit 1; }
cleanup() {
  [[ -n "$serve_pid" ]] && kill -9 "$serve_pid" 2>/dev/null || true
  pkill -9 -f "$root/jobs" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
