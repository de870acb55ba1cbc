#!/usr/bin/env bash
# The live autoscaler on Slurm for real: `edp-autoscale serve --backend slurm` on the namespace test
# cluster's Slurm (scripts/testcluster.sh slurm-up: Debian 12's 22.05, 3 nodes, job expansion
# permitted), its jobs the MLP example paced by EDP_MIN_STEP_MS, beside jobs of "another user"
# (sbatch of a shell loop). Every wait is for an event (a line of the controller's log, a state in
# squeue, a field of jobs.json), bounded; a wait that runs out prints the controller's log, the
# table and the queue. Exit 77 (skipped) where namespaces or the Slurm packages are missing.
#
#   serve_slurm.sh share   three edp jobs and another user's job on three nodes: a grow that waits
#                          in Slurm's queue (job expansion), a shrink whose node the other job gets,
#                          a third edp job once that job ends; nothing outside Slurm
#   serve_slurm.sh ops     grow by a new allocation (restart at the checkpoint), the controller killed
#                          and started again, a node drained under a job, an edp job cancelled with
#                          scancel from outside
#   serve_slurm.sh types   nodes of two GPU types (Slurm GRES: edp-h1 and edp-h2 with two "a100",
#                          edp-h3 with two "v100"; /dev/null stand-ins as the devices): each edp job
#                          asked of Slurm with --gres=gpu:TYPE:2 for the type its plan chose, and
#                          Slurm running it on nodes of that type
# Environment (tests/cluster/CMakeLists.txt): TC, AUTOSCALE, MLP, WORK.
set -euo pipefail
scenario=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*" >&2; dump; exit 1; }
on_h1() { "$TC" exec edp-h1 -- "$@"; }
AS=$AUTOSCALE
serve_pid=""

if ! "$TC" status >/dev/null 2>&1; then
  "$TC" check || exit 77
  echo "FAIL: the test cluster is not up (the fixture cluster_up failed?)" >&2
  exit 1
fi
"$TC" slurm-check || exit 77
dir=$WORK/serve-slurm-$scenario
rm -rf "$dir"; mkdir -p "$dir"; cd "$dir"

dump() {
  [ -f serve.log ] && { echo "--- serve.log (last 40 lines)"; tail -40 serve.log; }
  [ -d root ] && on_h1 "$AS" status --root root 2>/dev/null || true
  echo "--- squeue"; on_h1 squeue 2>/dev/null || true
  echo "--- sinfo"; on_h1 sinfo -N 2>/dev/null || true
}
# Whatever way the test ends: the controller stopped, every Slurm job of the test cancelled, Slurm
# stopped (slurm-down ends every process of the hosts but their holders).
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null || true
  on_h1 scancel --user=root 2>/dev/null || true
  "$TC" slurm-down || true
}
trap cleanup EXIT
"$TC" slurm-down  # a Slurm of its own: no job of an earlier test in the queue
if [ "$scenario" = types ]; then
  EDP_TC_GRES="edp-h1=a100:2 edp-h2=a100:2 edp-h3=v100:2" "$TC" slurm-up
else
  "$TC" slurm-up
fi

# wait_for SECONDS WHAT CMD...: runs CMD every 0.2 s until it succeeds.
wait_for() {
  local limit=$1 what=$2; shift 2
  for _ in $(seq $((limit * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  fail "$what: not within $limit s"
}
logged() { grep -q -- "$1" serve.log; }
# jq-like look at the table: field EXPR of job ID ("hosts", "sched['id']", "state", ...).
field() { python3 -c 'import json,sys; j={x["id"]: x for x in json.load(open("root/jobs.json"))["jobs"]}[sys.argv[1]]; print(eval(sys.argv[2], {}, j))' "$1" "$2"; }
is() { [ "$(field "$1" "$2" 2>/dev/null)" = "$3" ]; }
steps_at_least() { python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["step"] < int(sys.argv[2]))' "root/jobs/$1/status.json" "$2"; }
node_state() { on_h1 sinfo -h -N -n "$1" -o %T | head -1; }
# The processes of edp jobs on HOST (edprun, orted, the MLP; salloc of a grow), by program name.
job_procs() {
  local p
  for p in $("$TC" pids "$1"); do
    case "$(cat "/proc/$p/comm" 2>/dev/null)" in edprun|orted|fashion_mnist_m|salloc) echo "$p" ;; esac
  done
}
# Every process of an edp job on every host descends from a slurmstepd: Slurm started it.
under_slurm() {
  local h p q comm ok bad=""
  for h in edp-h1 edp-h2 edp-h3; do
    for p in $(job_procs "$h"); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = salloc ] && continue  # the controller's request, not the job
      ok=0; q=$p
      while [ -n "$q" ] && [ "$q" -gt 1 ]; do
        comm=$(cat "/proc/$q/comm" 2>/dev/null) || break
        [ "$comm" = slurmstepd ] && { ok=1; break; }
        q=$(awk '{print $4}' "/proc/$q/stat" 2>/dev/null)
      done
      [ -e "/proc/$p" ] || continue  # it ended while its ancestors were read
      [ $ok = 1 ] || bad+="$h:$p($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-80)) "
    done
  done
  [ -z "$bad" ] || fail "processes of edp jobs that Slurm did not start: $bad"
  echo "ok: every process of the edp jobs descends from a slurmstepd"
}
# spec NAME WORKERS MAX WEIGHT: the MLP for a long time (1000 epochs of 6000 samples), 64 samples
# per worker, at least 100 ms a step; the test cancels what still runs at its end.
spec() {
  cat <<JSON
{"name": "$1", "command": ["$MLP", "--limit", "6000", "--epochs", "1000", "--threads", "1", "--no-eval",
  "--checkpoint-dir", "{job_dir}/ck", "--control-every", "5"],
 "env": {"EDP_MIN_STEP_MS": "100"}, "samples": 6000000,
 "min_workers": 1, "max_workers": $3, "workers": $2, "min_batch": 64, "max_batch": $((64 * $3)), "batch": $((64 * $2)),
 "max_worker_batch": 64, "weight": $4, "max_restarts": 1}
JSON
}
serve() {
  on_h1 "$AS" serve --root root --backend slurm --policy dp --replan 2 --tick 0.1 --slurm-poll 0.5 --pause 0.1 \
    --edprun-args "--threads-per-rank 1" --exit-when-idle "$@" >> serve.log 2>&1 &
  serve_pid=$!
  wait_for 30 "the controller's start" test -e root/serve.json
}
finish() {  # cancels the jobs still running; the controller then ends (--exit-when-idle)
  local id
  for id in "$@"; do on_h1 "$AS" cancel --root root "$id" >/dev/null 2>&1 || true; done
  wait_for 120 "the controller's end once every job ended" bash -c "! kill -0 $serve_pid"
  wait "$serve_pid" || fail "edp-autoscale serve failed"
  serve_pid=""
  on_h1 "$AS" status --root root
  wait_for 60 "an empty queue" bash -c "[ -z \"\$(\"$TC\" exec edp-h1 -- squeue -h -t PD,R,CG,CF)\" ]"
  for h in edp-h1 edp-h2 edp-h3; do
    [ -z "$(job_procs "$h")" ] || fail "left running on $h: $(job_procs "$h" | xargs -r ps -o pid=,args= -p)"
  done
}
# The events of job ID as "event from_workers workers step" lines.
events() { python3 -c 'import json,sys
for l in open(sys.argv[1]): e=json.loads(l); print(e["event"], e.get("from_workers", 0), e.get("workers", 0), e.get("step", 0))' "root/jobs/$1/events.jsonl"; }

case "$scenario" in
share)
  serve
  spec b 2 2 1 > b.json; spec a 1 2 10 > a.json; spec c 1 1 100 > c.json
  # 1. B starts on two nodes; A arrives and takes the third.
  b=$(on_h1 "$AS" submit --root root b.json)
  wait_for 120 "B training" steps_at_least "$b" 10
  a=$(on_h1 "$AS" submit --root root a.json)
  # 2. Once A is measured, the plan gives it a second node, B's (A weighs 10 times more): B shrinks
  # to one node and A's grow asks Slurm for a node by job expansion. The node is B's until B's rank
  # there has left, so the grow waits in Slurm's queue; when B gives it back, Slurm grants it, the
  # controller merges it into A's allocation and A restarts at two nodes from its checkpoint.
  wait_for 120 "A's grow waiting in Slurm's queue" logged "job $a: its grow waits in Slurm's queue: job [0-9]* PENDING"
  wait_for 120 "B giving a node back" logged "job $b: gave node(s) edp-h[0-9] back to Slurm"
  wait_for 120 "Slurm granting A's grow" logged "job $a: Slurm granted its grow"
  wait_for 120 "A at two nodes" is "$a" "len(hosts)" 2
  events "$a" | grep -q "^rescale 1 2 " || fail "A's events show no rescale 1 -> 2: $(events "$a" | tr '\n' ';')"
  under_slurm
  # 3. Another user's job asks for a node; none is idle, it waits. The controller takes its node off
  # what edp plans with: A shrinks to one node, and the other job gets a node A gave back. (A was
  # resized once already, by the merge: where Slurm refuses a second resize of a job (22.05 without
  # slurmdbd, docs/autoscaler.md §8) A moves to a new allocation of one node instead of scontrol.)
  cat > foreign.sh <<'EOF'
#!/bin/bash
hostname > "$1.node"
for _ in $(seq 1500); do [ -e "$1.release" ] && exit 0; sleep 0.2; done
EOF
  chmod +x foreign.sh
  a_hosts=$(field "$a" "' '.join(h[0] for h in hosts)")
  f=$(on_h1 sbatch --parsable -N1 --exclusive -J foreign -o foreign.out --wrap "$PWD/foreign.sh $PWD/foreign")
  wait_for 60 "the other job waiting" bash -c "[ \"\$(\"$TC\" exec edp-h1 -- squeue -h -j $f -o %T)\" = PENDING ]"
  wait_for 120 "the controller giving way" logged "other users' job(s) $f wait for 1 node(s)"
  wait_for 120 "A shrinking to one node" bash -c "grep -q -e 'job $a: gave node(s) edp-h[0-9] back to Slurm' \
    -e 'job $a: stopped at a checkpoint at 2 worker(s) and started again at 1 in a new allocation' serve.log"
  wait_for 120 "the other job running" test -s foreign.node
  got=$(cat foreign.node)
  [[ " $a_hosts " == *" $got "* ]] || fail "the other job runs on $got, not on a node A gave back (A had $a_hosts)"
  grep -E "job $a: (gave node|stopped at a checkpoint at 2)" serve.log | sed 's/^edp-autoscale serve: //'
  echo "ok: A (on $a_hosts) shrank to one node and the other user's job $f got $got"
  # 4. C arrives: no node for it while the other job runs (A and B keep one each); once it ends, C
  # starts: three edp jobs on the three nodes.
  c=$(on_h1 "$AS" submit --root root c.json)
  wait_for 30 "C queued" is "$c" state queued
  first_c=$(python3 -c 'import json,sys
for l in open("root/decisions.jsonl"):
    for d in json.loads(l)["jobs"]:
        if d["job"] == sys.argv[1]: print(d["action"], "-", d["reason"]); sys.exit()' "$c")
  echo "C's first decision: $first_c"
  [[ "$first_c" == wait* ]] || fail "C was not made to wait while the other job held a node: $first_c"
  touch foreign.release
  wait_for 120 "C running in Slurm" is "$c" "sched['state']" RUNNING
  wait_for 120 "C training" steps_at_least "$c" 3
  for id in "$a" "$b" "$c"; do is "$id" "len(hosts)" 1 || fail "job $id holds $(field "$id" hosts)"; done
  used=$(for id in "$a" "$b" "$c"; do field "$id" "hosts[0][0]"; done | sort -u | wc -l)
  [ "$used" = 3 ] || fail "the three jobs do not hold three nodes"
  under_slurm
  on_h1 "$AS" status --root root
  finish "$a" "$b" "$c"
  ;;

ops)
  serve --slurm-grow new-allocation
  spec a 1 2 1 > a.json; spec b 1 1 100 > b.json
  # 1. Grow without job expansion: A stops at a checkpoint and starts again at two nodes in a new
  # Slurm job, resuming at the step it stopped at.
  a=$(on_h1 "$AS" submit --root root a.json)
  wait_for 120 "A in Slurm" is "$a" "sched['state']" RUNNING
  first=$(field "$a" "sched['id']")
  wait_for 120 "A's grow by a new allocation" logged "job $a: stopped at a checkpoint at 1 worker(s) and started again at 2 in a new allocation"
  wait_for 120 "A at two nodes" is "$a" "len(hosts)" 2
  second=$(field "$a" "sched['id']")
  [ "$second" != "$first" ] || fail "A's grow did not start a new Slurm job ($first)"
  stop=$(events "$a" | awk '$1 == "stop" {s = $4} END {print s}')
  [ -n "$stop" ] || fail "A's events show no stop: $(events "$a" | tr '\n' ';')"
  wait_for 120 "A resuming at step $stop" grep -q "resumed from .*ckpt-0*$stop.edp: step $stop," "root/jobs/$a/log"
  echo "ok: A stopped at step $stop in Slurm job $first and resumed there in Slurm job $second at two nodes"
  # 2. The controller killed (SIGKILL) and started again finds A by its Slurm job id.
  kill -9 "$(python3 -c 'import json; print(json.load(open("root/serve.json"))["pid"])')"
  wait "$serve_pid" 2>/dev/null || true
  serve --slurm-grow new-allocation
  wait_for 60 "the controller re-adopting A" logged "re-adopted 1 job(s)"
  is "$a" "sched['id']" "$second" || fail "A is no longer Slurm job $second: $(field "$a" sched)"
  # 3. An administrator drains A's second node: A leaves it (like a lost host), gives it back, and
  # the drain completes; no process of A is left there.
  node=$(field "$a" "hosts[1][0]")
  on_h1 scontrol update NodeName="$node" State=DRAIN Reason=edp-test
  wait_for 60 "the controller seeing the drain" logged "job $a: 1 of its slot(s) are being taken away (drained)"
  wait_for 120 "A giving the drained node back" logged "job $a: gave node(s) $node back to Slurm"
  wait_for 60 "the drain completed" bash -c "[ \"\$(\"$TC\" exec edp-h1 -- sinfo -h -N -n $node -o %T | head -1)\" = drained ]"
  [ -z "$(job_procs "$node")" ] || fail "processes of A left on the drained $node: $(job_procs "$node" | xargs -r ps -o pid=,args= -p)"
  is "$a" "len(hosts)" 1 || fail "A holds $(field "$a" hosts)"
  echo "ok: A left the drained node $node, which is now $(node_state "$node")"
  on_h1 scontrol update NodeName="$node" State=RESUME
  # 4. B starts; its owner (or an administrator) cancels it in Slurm: edp sees it cancelled.
  b=$(on_h1 "$AS" submit --root root b.json)
  wait_for 120 "B running in Slurm" is "$b" "sched['state']" RUNNING
  on_h1 scancel "$(field "$b" "sched['id']")"
  wait_for 60 "B cancelled" is "$b" state cancelled
  field "$b" error | grep -q "cancelled in Slurm" || fail "B's note: $(field "$b" error)"
  on_h1 "$AS" status --root root
  finish "$a"
  ;;
types)
  # A100s twice as fast as V100s: a job of two nodes fits only the A100 nodes; one of one node then
  # takes the V100 node.
  serve --gpu-speeds a100=2,v100=1
  wait_for 30 "the controller naming the types" logged "3 node(s) (2 with GPUs a100: edp-h1,edp-h2; 1 with GPUs v100: edp-h3)"
  ! logged "no GPU here is of type" || fail "serve did not know the partition's types when it read --gpu-speeds"
  spec a 2 2 1 > a.json; spec b 1 1 1 > b.json
  a=$(on_h1 "$AS" submit --root root a.json)
  wait_for 120 "A running in Slurm" is "$a" "sched['state']" RUNNING
  b=$(on_h1 "$AS" submit --root root b.json)
  wait_for 120 "B running in Slurm" is "$b" "sched['state']" RUNNING
  # What edp asked for and where Slurm ran it: the job's GRES request, its nodes, their GPUs.
  for x in "$a:a100:edp-h1 edp-h2" "$b:v100:edp-h3"; do
    id=${x%%:*}; rest=${x#*:}; type=${rest%%:*}; nodes=${rest#*:}
    is "$id" gpu_type "$type" || fail "job $id's type is $(field "$id" gpu_type), not $type"
    slurm_id=$(field "$id" "sched['id']")
    grep -q "job $id is Slurm job $slurm_id .*--gres=gpu:$type:2 " serve.log || fail "job $id was not asked with --gres=gpu:$type:2"
    got=$(on_h1 scontrol show hostnames "$(on_h1 squeue -h -j "$slurm_id" -o %N)" | sort | xargs)
    [ "$got" = "$nodes" ] || fail "Slurm job $slurm_id (edp job $id, $type) runs on $got, not $nodes"
    gres=$(on_h1 scontrol show job -d "$slurm_id" | grep -o "GRES=gpu:$type:2([^)]*)" | head -1)
    [ -n "$gres" ] || fail "Slurm job $slurm_id holds no gpu:$type:2: $(on_h1 scontrol show job -d "$slurm_id" | grep -i gres)"
    echo "ok: edp job $id (gpu_type $type) is Slurm job $slurm_id on $got, holding $gres per node"
  done
  wait_for 120 "A training" steps_at_least "$a" 3
  wait_for 120 "B training" steps_at_least "$b" 3
  under_slurm
  on_h1 "$AS" status --root root
  finish "$a" "$b"
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo "ok: $scenario"
