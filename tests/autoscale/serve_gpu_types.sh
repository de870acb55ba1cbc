#!/usr/bin/env bash
# edp-autoscale serve on GPU slots of two types, learned from nvidia-smi: a fake nvidia-smi on
# PATH reports GPU 0 as "NVIDIA A100-SXM4-40GB" and 1 and 2 as "NVIDIA H100 80GB HBM3"; the jobs'
# edprun is a stand-in that records its arguments and exits 0. A job of 2 GPUs, then one of 1.
# Checks:
#   - serve names the types and their GPUs ("3 gpu slot(s) (1 a100-sxm4-40gb: 0; 2 h100-80gb-hbm3: 1 2)");
#   - the first job's edprun got the two H100s (--gpus 1,2: the plan's choice, although GPU 0 is
#     the first free one), the second the A100 (--gpus 0); the table and `status` name each type;
#   - with an nvidia-smi that fails, serve says the types are not known and the jobs start as
#     before (GPUs 0,1 and 2 in submission order, no type in the table or in status);
#   - --gpu-speeds decides the type of a job not measured anywhere; bad values are refused.
# usage: serve_gpu_types.sh BUILD_DIR
set -euo pipefail
as="$1/tools/edp-autoscale/edp-autoscale"
work=$(mktemp -d /tmp/edp-gpu-types-test.XXXXXX)
serve_pid=""
cleanup() {
  [[ -z "$serve_pid" ]] || { kill -9 "$serve_pid" && wait "$serve_pid"; } 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; cat "$work"/serve*.log >&2 || true; exit 1; }

mkdir -p "$work/bin" "$work/broken"
cat > "$work/bin/nvidia-smi" <<'SH'
#!/bin/sh
[ "$1" = "--query-gpu=index,name" ] && [ "$2" = "--format=csv,noheader" ] || { echo "fake nvidia-smi: unexpected $*" >&2; exit 2; }
printf '0, NVIDIA A100-SXM4-40GB\n1, NVIDIA H100 80GB HBM3\n2, NVIDIA H100 80GB HBM3\n'
SH
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver." >&2\nexit 9\n' \
  > "$work/broken/nvidia-smi"
cat > "$work/edprun" <<SH
#!/bin/sh
echo "\$*" >> "$work/edprun.args"
sleep 0.5
SH
chmod +x "$work/bin/nvidia-smi" "$work/broken/nvidia-smi" "$work/edprun"
spec='{"name": "NAME", "command": ["/bin/true"], "min_workers": W, "max_workers": W, "workers": W, "min_batch": 64, "max_batch": 64, "batch": 64}'

run() {  # name, PATH dir of nvidia-smi
  local root="$work/root-$1"
  rm -f "$work/edprun.args"
  local first=${spec/NAME/first} second=${spec/NAME/second}
  echo "${first//W/2}" > "$work/first.json"
  echo "${second//W/1}" > "$work/second.json"
  "$as" submit --root "$root" "$work/first.json" > /dev/null
  "$as" submit --root "$root" "$work/second.json" > /dev/null
  PATH="$2:$PATH" timeout 60 "$as" serve --root "$root" --slots 3 --slot-kind gpu --policy dp --tick 0.05 \
    --edprun "$work/edprun" --exit-when-idle > "$work/serve-$1.log" 2>&1 || fail "serve ($1) exited $?"
  "$as" status --root "$root" > "$work/status-$1"
  cat "$work/status-$1"
}

run typed "$work/bin"
grep -q "3 gpu slot(s) (1 a100-sxm4-40gb: 0; 2 h100-80gb-hbm3: 1 2)" "$work/serve-typed.log" || fail "serve did not name the types"
python3 - "$work/edprun.args" "$work/root-typed/jobs.json" "$work/status-typed" <<'PY' || fail "typed placement"
import json, re, sys
# The GPUs each job's edprun was given, by job id (from its --status-file path).
gpus = {re.search(r"/jobs/(j\d+)/status.json", l).group(1): l.split("--gpus ")[1].split()[0] for l in open(sys.argv[1])}
assert gpus == {"j0001": "1,2", "j0002": "0"}, f"the 2-GPU job on the H100s, the other on the A100: {gpus}"
want = {"0": "a100-sxm4-40gb", "1,2": "h100-80gb-hbm3"}
jobs = json.load(open(sys.argv[2]))["jobs"]
by = {j["id"]: j["gpu_type"] for j in jobs}
assert by == {i: want[g] for i, g in gpus.items()}, (by, gpus)
for j in jobs:
    assert j["state"] == "done", j
status = open(sys.argv[3]).read()
assert "gpu type" in status and "a100-sxm4-40gb" in status and "h100-80gb-hbm3" in status, status
print("ok: one type per job:", by, gpus)
PY

run untyped "$work/broken"
grep -q "the GPUs' types are not known (nvidia-smi --query-gpu=index,name --format=csv,noheader failed (exit 9)" \
  "$work/serve-untyped.log" || fail "no word that the types are not known"
python3 - "$work/edprun.args" "$work/root-untyped/jobs.json" "$work/status-untyped" <<'PY' || fail "untyped placement"
import json, re, sys
# By job id: the stand-ins append their lines in whichever order the two processes run.
gpus = {re.search(r"/jobs/(j\d+)/status.json", l).group(1): l.split("--gpus ")[1].split()[0] for l in open(sys.argv[1])}
assert gpus == {"j0001": "0,1", "j0002": "2"}, f"as before: GPUs in submission order: {gpus}"
assert all("gpu_type" not in j for j in json.load(open(sys.argv[2]))["jobs"])
assert "gpu type" not in open(sys.argv[3]).read()
print("ok: without types, GPUs 0,1 and 2 in submission order")
PY
# --gpu-speeds: one job of 1 GPU, nothing measured yet; it starts on the type named faster (the
# A100, GPU 0, or an H100, GPU 1), whichever that is. A type no GPU has and a malformed speed are
# refused before anything starts.
one() {  # name, --gpu-speeds value
  local root="$work/root-$1"
  rm -f "$work/edprun.args"
  local only=${spec/NAME/only}
  echo "${only//W/1}" > "$work/only.json"
  "$as" submit --root "$root" "$work/only.json" > /dev/null
  PATH="$work/bin:$PATH" timeout 60 "$as" serve --root "$root" --slots 3 --slot-kind gpu --policy dp --tick 0.05 \
    --gpu-speeds "$2" --edprun "$work/edprun" --exit-when-idle > "$work/serve-$1.log" 2>&1 || fail "serve ($1) exited $?"
  sed -n 's/.*--gpus \([0-9,]*\).*/\1/p' "$work/edprun.args"
}
[[ $(one a100-fast a100-sxm4-40gb=2) == 0 ]] || fail "with the A100 named twice as fast, the job did not start on GPU 0"
[[ $(one h100-fast h100-80gb-hbm3=2) == 1 ]] || fail "with the H100s named twice as fast, the job did not start on GPU 1"
for bad in "v100=2" "a100-sxm4-40gb=0" "a100-sxm4-40gb" "a100-sxm4-40gb=2x" "h100-80gb-hbm3=1,h100-80gb-hbm3=2"; do
  if PATH="$work/bin:$PATH" timeout 60 "$as" serve --root "$work/root-bad" --slots 3 --slot-kind gpu --gpu-speeds "$bad" \
       --edprun "$work/edprun" --exit-when-idle > "$work/bad.log" 2>&1; then
    fail "--gpu-speeds $bad was taken"
  fi
  grep -q -- "--gpu-speeds" "$work/bad.log" || fail "--gpu-speeds $bad: no word of what is wrong: $(cat "$work/bad.log")"
  echo "refused: --gpu-speeds $bad: $(tail -n 1 "$work/bad.log")"
done
echo "PASS"
