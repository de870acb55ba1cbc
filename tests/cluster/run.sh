#!/usr/bin/env bash
# edp across hosts for real, on the namespace test cluster (scripts/testcluster.sh): one scenario
# per CTest test (tests/cluster/CMakeLists.txt), all on the same cluster (a CTest fixture brings it
# up before and down after). Exit 77 (CTest: skipped) with the reason where namespaces cannot be
# made; every check prints what it expected and what it got.
#
#   run.sh up | hosts | lost | rescale | serve | slurm | down
# Environment: TC (testcluster.sh), EDPRUN, MLP (fashion_mnist_mlp), PROBE (launch_rank_probe),
# SEQ (elastic_sequence), CNN (fashion_mnist_cnn), AUTOSCALE (edp-autoscale), FAKE (tests/launch/fake), WORK (a directory on the shared file system).
set -euo pipefail
scenario=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*" >&2; exit 1; }
on_h1() { "$TC" exec edp-h1 -- "$@"; }
# The ranks' lines in $1 (a directory of rank.R files written by the probe) must match "R host cpus".
expect_ranks() {
  local dir=$1; shift
  local r=0 want line
  for want in "$@"; do
    read -r host cpus <<<"$want"
    line=$(cat "$dir/rank.$r" 2>/dev/null) || fail "rank $r wrote no line in $dir"
    [[ "$line" == *" host=$host cpus=$cpus" ]] || fail "rank $r: expected host=$host cpus=$cpus, got: $line"
    r=$((r + 1))
  done
  [ ! -e "$dir/rank.$r" ] || fail "more ranks than expected in $dir"
}
json_field() { sed -n "s/.*\"$2\": \([^,}]*\).*/\1/p" <<<"$1"; }

need_cluster() {
  if ! "$TC" status >/dev/null 2>&1; then
    "$TC" check || exit 77  # prints why namespaces cannot be made here
    fail "the test cluster is not up (the fixture cluster_up failed?)"
  fi
  # A link a failed test left cut (cluster_lost) must not fail the tests after it.
  local h link
  while read -r h _ _ link; do
    [ "$link" = "link=DOWN" ] || [ "$link" = "link=LOWERLAYERDOWN" ] || continue
    echo "the link of $h was left cut; restoring it"
    "$TC" link "$h" up
  done < <("$TC" status)
}
# Runs edprun on edp-h1 with its output in $1, for at most $2 seconds: a job that hangs fails the
# test with what it printed and what still runs on each host, instead of running into CTest's
# timeout with nothing to show. Returns edprun's exit code.
edprun_bounded() {
  local out=$1 limit=$2 rc=0 h p pid; shift 2
  "$TC" exec edp-h1 -- "$EDPRUN" "$@" > "$out" 2>&1 &
  pid=$!
  for _ in $(seq $((limit * 10))); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    echo "--- $out (edprun has not ended after $limit s)"; cat "$out"
    for h in edp-h1 edp-h2 edp-h3; do
      echo "--- processes on $h"
      for p in $("$TC" pids "$h"); do echo "$p $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)"; done
    done
    for h in edp-h1 edp-h2 edp-h3; do "$TC" kill "$h"; done
    wait $pid || true
    fail "edprun $* did not end within $limit s"
  fi
  wait $pid || rc=$?
  return $rc
}

mkdir -p "$WORK"
case "$scenario" in
up)
  "$TC" check || exit 77
  "$TC" up 3
  "$TC" up 3 2>&1 | grep -q "already up" || fail "a second up did not find the cluster up"
  # A host broken as a killed test or a reboot of its holder leaves it: up repairs the cluster.
  kill "$(cat "${EDP_TC_STATE:-/run/edp-testcluster}/edp-h2/holder.pid")"
  sleep 0.5
  if "$TC" status >/dev/null; then fail "status did not notice a dead host"; fi
  "$TC" up 3
  "$TC" status
  [ "$(on_h1 hostname)" = edp-h1 ] || fail "edp-h1 has host name $(on_h1 hostname)"
  got=$(on_h1 mpirun --host edp-h1:1,edp-h2:1,edp-h3:1 -np 3 hostname | sort | tr '\n' ' ')
  [ "$got" = "edp-h1 edp-h2 edp-h3 " ] || fail "mpirun across the hosts ran on: $got"
  ;;

hosts)
  need_cluster
  cd "$WORK"
  "$TC" hostfile 2 > hosts2x3
  "$TC" hostfile 2 2 > hosts2x2
  "$TC" hostfile 1 > hosts1x3
  echo "edp-h1 slots=3" > hosts3x1
  cores=$(nproc)
  half=$(( cores / 2 > 0 ? cores / 2 : 1 ))
  # The dry run: the per-host plan and the exact host list mpirun gets.
  plan=$(on_h1 "$EDPRUN" --dry-run --hostfile hosts2x3 -np 6 -- "$PROBE" ok)
  echo "$plan"
  for h in edp-h1 edp-h2 edp-h3; do
    grep -Eq "^  $h  ranks 2  threads/rank $half$" <<<"$plan" || fail "dry run: no 'ranks 2 threads/rank $half' line for $h"
  done
  grep -q -- "--host edp-h1:2,edp-h2:2,edp-h3:2 --map-by slot:PE=$half --bind-to core" <<<"$plan" || fail "dry run: mpirun's hosts"

  # Placement on 2 and 3 hosts x N ranks: each rank on its host, bound to its share of the cores
  # (every "host" has this machine's cores: 2 ranks -> half each, 1 rank -> all of them).
  run_probe() {  # dir hostfile np
    rm -rf "$1"; mkdir -p "$1"
    PROBE_OUT=$PWD/$1 on_h1 "$EDPRUN" --hostfile "$2" -np "$3" --mpirun-args "-x PROBE_OUT" -- "$PROBE" ok
  }
  if [ "$cores" -ge 2 ]; then
    run_probe p2x2 hosts2x2 4
    expect_ranks p2x2 "edp-h1 $half" "edp-h1 $half" "edp-h2 $half" "edp-h2 $half"
    run_probe p2x3 hosts2x3 6
    expect_ranks p2x3 "edp-h1 $half" "edp-h1 $half" "edp-h2 $half" "edp-h2 $half" "edp-h3 $half" "edp-h3 $half"
  fi
  run_probe p1x3 hosts1x3 3
  expect_ranks p1x3 "edp-h1 $cores" "edp-h2 $cores" "edp-h3 $cores"
  grep -q "threads=$cores " p1x3/rank.2 || fail "rank 2: EDP_NUM_THREADS is not $cores: $(cat p1x3/rank.2)"

  # GPU mode with the fake GPU tools: one MPS daemon per host, started and stopped in that host's
  # namespaces (the fake records its UTS host name; each host's /tmp is its own).
  rm -rf pg fake.log; mkdir -p pg
  PATH=$FAKE:$PATH EDP_FAKE_LOG=$PWD/fake.log EDP_TC_SENDENV="PATH EDP_FAKE_LOG" PROBE_OUT=$PWD/pg \
    on_h1 "$EDPRUN" --hostfile hosts2x3 -np 6 --ranks-per-gpu 2 --gpus 0 --mps on --mpirun-args "-x PROBE_OUT" \
    -- "$PROBE" ok
  cat fake.log
  for h in edp-h1 edp-h2 edp-h3; do
    [ "$(grep -c "^start gpu=GPU-fake0000-0000-0000-0000-000000000000 .* host=$h$" fake.log)" = 1 ] ||
      fail "expected one MPS daemon started on $h"
    [ "$(grep -c "^quit-on host=$h " fake.log)" = 1 ] || fail "expected the MPS daemon of $h stopped on $h"
  done
  for r in 0 1 2 3 4 5; do
    grep -q "mps threads" pg/rank.$r || fail "rank $r was not set up for MPS: $(cat pg/rank.$r)"
  done

  # Training: 2 hosts x 2 ranks; then 3 hosts x 1 rank against 1 host x 3 ranks, same seed: the
  # same numbers in the JSON summary and the same final checkpoint, byte for byte (tolerance 0:
  # the reduction order does not depend on where the ranks run).
  train=("$MLP" --epochs 1 --limit 1536 --threads 1 --seed 7)
  out=$(on_h1 "$EDPRUN" --hostfile hosts2x2 -np 4 -- "${train[@]}")
  j=$(grep '^{"model"' <<<"$out") || fail "no JSON summary: $out"
  [ "$(json_field "$j" world_size)" = 4 ] || fail "2x2: $j"
  rm -rf ck3 ck1
  j3=$(on_h1 "$EDPRUN" --hostfile hosts1x3 -np 3 -- "${train[@]}" --checkpoint-dir ck3 | grep '^{"model"')
  j1=$(on_h1 "$EDPRUN" --hostfile hosts3x1 -np 3 --oversubscribe -- "${train[@]}" --checkpoint-dir ck1 | grep '^{"model"')
  echo "3 hosts: $j3"; echo "1 host:  $j1"
  for k in world_size global_batch test_acc final_loss; do
    [ "$(json_field "$j3" $k)" = "$(json_field "$j1" $k)" ] || fail "$k differs: 3 hosts $(json_field "$j3" $k), 1 host $(json_field "$j1" $k)"
  done
  c3=$(ls ck3/*.edp); c1=$(ls ck1/*.edp)
  [ "$(basename "$c3")" = "$(basename "$c1")" ] || fail "final checkpoints $c3 vs $c1"
  cmp "$c3" "$c1" || fail "the final checkpoints differ"
  echo "ok: the 3-host run equals the 1-host run bitwise ($(basename "$c3"))"
  ;;

lost)
  need_cluster
  cd "$WORK"
  "$TC" hostfile 1 > hosts1x3
  rm -rf lost; mkdir -p lost
  # 3 hosts x 1 rank, a checkpoint every 10 steps, a 6 s communication timeout. Once the job has
  # committed its first checkpoint, edp-h3's link goes down. The ranks of edp-h1 and edp-h2 stall,
  # name rank 2 on edp-h3, edprun ends the mpirun that cannot reach edp-h3 and restarts on edp-h1
  # and edp-h2 (--min-np 2) from the last checkpoint.
  every=10
  # Whatever way this ends, edp-h3 gets its link back and loses its leftovers (its orted could not
  # be told): the tests after this one use all three hosts.
  trap '"$TC" kill edp-h3 || true; "$TC" link edp-h3 up || true' EXIT
  # Cuts edp-h3's link once the job in $1 has committed a checkpoint; a job that commits none in
  # 90 s is left alone (and fails below), so that a slow start is never mistaken for a lost host.
  cut_after_checkpoint() {
    for _ in $(seq 900); do
      if ls "$1"/ck/*.edp >/dev/null 2>&1; then "$TC" link edp-h3 down; return; fi
      sleep 0.1
    done
    echo "no checkpoint in $1/ck within 90 s; edp-h3's link left up"
  }
  cut_after_checkpoint lost &
  cutter=$!
  rc=0
  edprun_bounded lost/out 120 --hostfile hosts1x3 -np 3 --max-restarts 1 --restart-backoff 0 --kill-grace 3 --min-np 2 -- \
    stdbuf -oL "$MLP" --epochs 2 --limit 20000 --threads 1 --no-eval --checkpoint-dir lost/ck \
    --checkpoint-every $every --comm-timeout 6 || rc=$?
  wait $cutter || true
  grep -v '^epoch .*%' lost/out | grep -v '^\[' | tail -40
  "$TC" kill edp-h3; "$TC" link edp-h3 up
  [ $rc = 0 ] || fail "edprun exited with $rc"
  grep -q "rank 2 on host edp-h3: no answer" lost/out || fail "the stall report does not name rank 2 on edp-h3"
  grep -q "edprun: host(s) edp-h3 lost (rank(s) 2 did not answer); restart 1 of 1 on edp-h1,edp-h2 at 2 rank(s)" lost/out ||
    fail "edprun did not restart without edp-h3"
  stalled=$(sed -n 's/.*stall: allreduce .* step \([0-9]*\)).*/\1/p' lost/out | head -1)
  resumed=$(sed -n 's/.*resumed from .*: step \([0-9]*\), .*/\1/p' lost/out | head -1)
  [ -n "$stalled" ] && [ -n "$resumed" ] || fail "no stall step ($stalled) or resume step ($resumed)"
  lost_steps=$((stalled - resumed))
  echo "stalled at step $stalled, resumed from step $resumed: $lost_steps step(s) lost (at most $every)"
  [ $lost_steps -ge 0 ] && [ $lost_steps -le $every ] || fail "lost $lost_steps steps, more than the checkpoint interval $every"
  grep -q '^{"model".*"world_size": 2,' lost/out || fail "the job did not finish at 2 ranks"
  # Without --min-np a lost host whose ranks the others cannot take ends the job, saying so.
  rm -rf lost2; mkdir -p lost2
  cut_after_checkpoint lost2 &
  cutter=$!
  rc=0
  edprun_bounded lost2/out 120 --hostfile hosts1x3 -np 3 --max-restarts 1 --restart-backoff 0 --kill-grace 3 -- \
    stdbuf -oL "$MLP" --epochs 2 --limit 20000 --threads 1 --no-eval --checkpoint-dir lost2/ck --checkpoint-every $every \
    --comm-timeout 6 || rc=$?
  wait $cutter || true
  "$TC" kill edp-h3; "$TC" link edp-h3 up
  grep -E "^(edprun|edp\[)" lost2/out || true
  [ $rc = 76 ] || fail "without --min-np: exit $rc, expected 76"
  grep -q "edprun: error: host(s) edp-h3 lost (rank(s) 2 did not answer); the other host(s) take 2 of the job's 3 rank(s), fewer than --min-np 3 allows; not restarting" lost2/out ||
    fail "without --min-np: no clear error"
  ;;

rescale)
  need_cluster
  rm -rf "$WORK/rescale"; mkdir -p "$WORK/rescale"; cd "$WORK/rescale"
  "$TC" hostfile 1 > hosts1x3
  "$TC" hostfile 2 > hosts2x3
  # Every rank records where it runs (its host's name: the UTS namespace), then becomes the program.
  cat > where.sh <<'EOF'
#!/bin/sh
echo "size=$EDP_WORLD_SIZE rank=$EDP_RANK host=$(hostname)" >> "$WHERE_LOG"
exec "$@"
EOF
  chmod +x where.sh
  # 1. The MLP on a hostfile of 3 hosts x 1 slot: 2 -> 3 ranks (a host joins) and 3 -> 2 (a host
  # leaves) by restart, asked through the control file (per-worker batch 64 kept). No sample lost
  # or repeated: 2000 samples give 5 steps at the first size, then the rest of the epoch at the
  # second: 2 -> 3: 5 x 128 = 640, ceil(1360 / 192) = 8 steps, final checkpoint step 13;
  # 3 -> 2: 5 x 192 = 960, ceil(1040 / 128) = 9 steps, step 14. The status file counts them too.
  rescale_mlp() {  # name from to last-step mode
    local d=$1 from=$2 to=$3 last=$4 mode=$5 want h r
    rm -rf "$d"; mkdir -p "$d"
    echo "{\"workers\": $to}" > "$d/ctl.json"
    WHERE_LOG=$PWD/$d/where EDP_RESCALE_MODE=$mode on_h1 "$EDPRUN" --hostfile hosts1x3 -np "$from" --control-file "$d/ctl.json" \
      --status-file "$d/status.json" --mpirun-args "-x WHERE_LOG -x EDP_RESCALE_MODE" -- \
      ./where.sh "$MLP" --limit 2000 --epochs 1 --threads 1 --no-eval --checkpoint-dir "$d/ck" --control-every 5 \
      > "$d/out" 2>&1 || { cat "$d/out"; fail "$d: edprun failed"; }
    grep -E '^(edprun|fashion_mnist_mlp)' "$d/out"
    want=""
    for n in $from $to; do
      for r in $(seq 0 $((n - 1))); do want+="size=$n rank=$r host=edp-h$((r + 1))"$'\n'; done
    done
    [ "$(sort "$d/where")" = "$(printf %s "$want" | sort)" ] ||
      fail "$d: ranks ran on (size rank host): $(sort "$d/where" | tr '\n' ';'), expected $(printf %s "$want" | sort | tr '\n' ';')"
    grep -q "edprun: rescale 1: $from -> $to rank(s)" "$d/out" || fail "$d: no rescale $from -> $to"
    [ -e "$d/ck/ckpt-$(printf %012d "$last").edp" ] || fail "$d: expected the final checkpoint at step $last (no sample lost or repeated), found: $(ls "$d/ck")"
    local done total
    done=$(grep -o '"samples_done": *[0-9]*' "$d/status.json" | grep -o '[0-9]*$')
    total=$(grep -o '"samples_total": *[0-9]*' "$d/status.json" | grep -o '[0-9]*$')
    [ "$done" = 2000 ] && [ "$total" = 2000 ] || fail "$d: status file: samples_done $done, samples_total $total, expected 2000 of 2000"
    grep -q "^{\"model\".*\"world_size\": $to," "$d/out" || fail "$d: the job did not finish at $to ranks"
  }
  rescale_mlp grow 2 3 13 restart
  rescale_mlp shrink 3 2 14 restart

  # 2. In place (EDP_RESCALE_MODE auto, the default): the elastic test program grows 2 -> 3 from
  # step 4 (MPI_Comm_spawn_multiple puts the new rank on edp-h3, where a restart at 3 would; the job
  # trains on while it starts, and the program waits for it before step 6: --settle-at) and
  # shrinks 3 -> 2 before step 8 (rank 2 leaves; it stays parked on edp-h3 until the job ends). Every
  # process records each place it takes; every sample of the epoch is trained on exactly once.
  rm -rf ip; mkdir -p ip
  on_h1 "$EDPRUN" --hostfile hosts1x3 -np 2 --control-file ip/control.json -- \
    "$SEQ" --plan 4:3,8:2 --settle-at 6 --record ip --limit 1000 --epochs 1 > ip/out 2>&1 || { cat ip/out; fail "in place: edprun failed"; }
  grep -E '^(edp|edprun|coverage|\{)' ip/out
  got=$(cat ip/where.* | sort -u | tr '\n' ';')
  want="size=2 rank=0 host=edp-h1;size=2 rank=1 host=edp-h2;size=3 rank=0 host=edp-h1;size=3 rank=1 host=edp-h2;size=3 rank=2 host=edp-h3;"
  [ "$got" = "$want" ] || fail "in place: ranks ran on $got, expected $want"
  [ "$(cat ip/where.* | wc -l)" = 7 ] || fail "in place: expected 7 places taken (2 + 3 + 2), got $(cat ip/where.* | wc -l)"
  grep -q "^coverage: 1 epoch(s) x 1000 samples, each seen once (3 processes)$" ip/out || fail "in place: coverage"
  grep -q "after 2 rescale(s) (2 in place, 0 by restart" ip/out || fail "in place: not 2 rescales in place"
  grep -q '^{"workers": 2, ' ip/out || fail "in place: the job did not end at 2 workers"

  # 3. GPU mode with the fake GPU tools, one fake GPU per host shared by 2 ranks through MPS, a job
  # that rescales by restart (EDP_RESCALE_MODE=restart where edprun runs): the rank probe grows
  # 4 -> 6 ranks (edp-h3 joins: its MPS daemon is started there, those of edp-h1 and edp-h2 keep
  # running) and shrinks 6 -> 4 (edp-h3 leaves: its daemon is stopped there, at the rescale, before
  # the job ends). A job that may grow in place gets daemons on every host from the start (below).
  mps_rescale() {  # name from to
    local d=$1 from=$2 to=$3
    rm -rf "$d"; mkdir -p "$d/p"
    echo "{\"workers\": $to}" > "$d/ctl.json"
    PATH=$FAKE:$PATH EDP_FAKE_LOG=$PWD/$d/fake.log EDP_TC_SENDENV="PATH EDP_FAKE_LOG" PROBE_OUT=$PWD/$d/p \
      EDP_RESCALE_MODE=restart on_h1 "$EDPRUN" --hostfile hosts2x3 -np "$from" --ranks-per-gpu 2 --gpus 0 --mps on --control-file "$d/ctl.json" \
      --mpirun-args "-x PROBE_OUT" -- "$PROBE" rescale "$to" "$d/ctl.json" keep > "$d/out" 2>&1 || { cat "$d/out"; fail "$d: edprun failed"; }
    grep '^edprun' "$d/out"
    # The daemons' starts and stops, in order: "start edp-hK" / "quit edp-hK".
    sed -n 's/^start gpu=.* host=\(.*\)$/start \1/p; s/^quit-on host=\([^ ]*\) .*/quit \1/p' "$d/fake.log" > "$d/mps"
    cat "$d/mps"
    for h in edp-h1 edp-h2 edp-h3; do
      [ "$(grep -cx "start $h" "$d/mps")" = 1 ] || fail "$d: expected one MPS daemon started on $h"
      [ "$(grep -cx "quit $h" "$d/mps")" = 1 ] || fail "$d: expected the MPS daemon of $h stopped once, on $h"
    done
    local r=0 line
    for h in edp-h1 edp-h1 edp-h2 edp-h2 edp-h3 edp-h3; do
      [ $r -lt "$to" ] || break
      line=$(cat "$d/p/rank.$r")
      [[ "$line" == *" host=$h cpus="* ]] || fail "$d: rank $r: expected on $h: $line"
      grep -q "mps threads" "$d/p/rank.$r" || fail "$d: rank $r was not set up for MPS: $line"
      r=$((r + 1))
    done
  }
  mps_rescale mps-grow 4 6
  grep -q "edprun: MPS daemons stopped on no host, started on edp-h3" mps-grow/out || fail "mps-grow: no start on edp-h3 alone"
  # edp-h3's daemon started after the others', before any was stopped.
  [ "$(sed -n 3p mps-grow/mps)" = "start edp-h3" ] || fail "mps-grow: edp-h3's daemon was not the third started"
  mps_rescale mps-shrink 6 4
  grep -q "edprun: MPS daemons stopped on edp-h3, started on no host" mps-shrink/out || fail "mps-shrink: no stop on edp-h3 alone"
  [ "$(sed -n 4p mps-shrink/mps)" = "quit edp-h3" ] || fail "mps-shrink: edp-h3's daemon was not stopped first, at the rescale"
  # May grow in place: 4 ranks on edp-h1 and edp-h2, daemons on all three hosts from the start.
  rm -rf mps-auto; mkdir -p mps-auto/p
  PATH=$FAKE:$PATH EDP_FAKE_LOG=$PWD/mps-auto/fake.log EDP_TC_SENDENV="PATH EDP_FAKE_LOG" PROBE_OUT=$PWD/mps-auto/p \
    on_h1 "$EDPRUN" --hostfile hosts2x3 -np 4 --ranks-per-gpu 2 --gpus 0 --mps on --control-file mps-auto/ctl.json \
    --mpirun-args "-x PROBE_OUT" -- "$PROBE" ok > mps-auto/out 2>&1 || { cat mps-auto/out; fail "mps-auto: edprun failed"; }
  for h in edp-h1 edp-h2 edp-h3; do
    [ "$(grep -c "^start gpu=.* host=$h$" mps-auto/fake.log)" = 1 ] || fail "mps-auto: expected one MPS daemon started on $h"
    [ "$(grep -c "^quit-on host=$h " mps-auto/fake.log)" = 1 ] || fail "mps-auto: expected the MPS daemon of $h stopped on $h"
  done
  [ ! -e mps-auto/p/rank.4 ] || fail "mps-auto: more than 4 ranks"

  # 4. Rank 0 elsewhere: edprun on edp-h1 with a hostfile of edp-h2 and edp-h3 only, so rank 0 runs
  # on edp-h2, whose /tmp is its own. With the job directory on the shared file system
  # (EDP_JOB_DIR_BASE, as edp-autoscale serve --hostfile sets it) rank 0 writes the rescale record
  # where edprun reads it: 1 -> 2 by restart, every sample once (2000 samples: 5 steps of 64, then
  # ceil(1680 / 128) = 14 steps: final checkpoint at step 19).
  rm -rf elsewhere; mkdir -p elsewhere/jd
  grep -v '^edp-h1 ' hosts1x3 > elsewhere/hosts
  echo '{"workers": 2}' > elsewhere/ctl.json
  WHERE_LOG=$PWD/elsewhere/where EDP_RESCALE_MODE=restart EDP_JOB_DIR_BASE=$PWD/elsewhere/jd on_h1 "$EDPRUN" \
    --hostfile elsewhere/hosts -np 1 --control-file elsewhere/ctl.json --mpirun-args "-x WHERE_LOG -x EDP_RESCALE_MODE" -- \
    ./where.sh "$MLP" --limit 2000 --epochs 1 --threads 1 --no-eval --checkpoint-dir elsewhere/ck --control-every 5 \
    > elsewhere/out 2>&1 || { cat elsewhere/out; fail "elsewhere: edprun failed"; }
  grep -E '^edprun' elsewhere/out
  got=$(sort elsewhere/where | tr '\n' ';')
  want="size=1 rank=0 host=edp-h2;size=2 rank=0 host=edp-h2;size=2 rank=1 host=edp-h3;"
  [ "$got" = "$want" ] || fail "elsewhere: ranks ran on $got, expected $want"
  grep -q "edprun: rescale 1: 1 -> 2 rank(s)" elsewhere/out || fail "elsewhere: no rescale 1 -> 2"
  [ -e elsewhere/ck/ckpt-000000000019.edp ] || fail "elsewhere: expected the final checkpoint at step 19, found: $(ls elsewhere/ck)"
  [ -z "$(ls elsewhere/jd)" ] || fail "elsewhere: edprun left its job directory: $(ls elsewhere/jd)"
  ;;

serve)
  # The live autoscaler across hosts: `edp-autoscale serve --hostfile` with 3 hosts x 1 slot runs
  # two CNN jobs submitted apart. Each job gets a hostfile of its own slots, rewritten before each
  # rescale; edprun reads it again at every restart (--reread-hostfile). Checks: both jobs done
  # with every sample; every rank of every start ran on a host of the job's hostfile; one job spanned
  # hosts; the controller never handed out more slots of a host than it has (decision log); the
  # plan changed the jobs' sizes (rescale events in the jobs' own files); nothing left running.
  need_cluster
  rm -rf "$WORK/serve"; mkdir -p "$WORK/serve"; cd "$WORK/serve"
  "$TC" hostfile 1 > hosts
  cat > where.sh <<'EOF2'
#!/bin/sh
# where.sh LOG PROGRAM...: records "size rank host hostfile-hosts" for this rank, then runs PROGRAM.
log=$1; shift
echo "$EDP_WORLD_SIZE $EDP_RANK $(hostname) $(grep -v '^#' "$(dirname "$log")/hostfile" | cut -d' ' -f1 | tr '\n' ',')" >> "$log"
exec "$@"
EOF2
  chmod +x where.sh
  AS=$AUTOSCALE
  spec() {  # name limit
    cat <<JSON
{"name": "$1", "command": ["$PWD/where.sh", "{job_dir}/where", "$CNN", "--limit", "$2", "--epochs", "2", "--threads", "1",
  "--no-eval", "--checkpoint-dir", "{job_dir}/ck", "--control-every", "5"],
 "min_workers": 1, "max_workers": 3, "workers": 1, "min_batch": 64, "max_batch": 192, "batch": 64,
 "max_worker_batch": 64, "max_restarts": 1}
JSON
  }
  spec a 6000 > a.json; spec b 3000 > b.json
  # --pause 0.1: these jobs train for seconds; with the default pause a cautiously predicted grow pays
  # only for jobs with more left (docs/autoscaler.md §8), and this test is about hosts, not that.
  # EDP_MIN_STEP_MS: every step lasts at least 60 ms (edprun passes it to the ranks on every host),
  # so job A's shortest run is 63 steps x 60 ms and the controller's moves land while it runs,
  # however fast the hosts train.
  on_h1 env EDP_MIN_STEP_MS=60 "$AS" serve --root root --hostfile hosts --policy dp --replan 2 --tick 0.1 --pause 0.1 \
    --exit-when-idle > serve.log 2>&1 &
  serve_pid=$!
  trap 'kill $serve_pid 2>/dev/null || true' EXIT
  for _ in $(seq 50); do [ -e root/serve.json ] && break; sleep 0.1; done
  ida=$(on_h1 "$AS" submit --root root a.json)
  for _ in $(seq 600); do  # B arrives once A trains
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["step"] < 5)' "root/jobs/$ida/status.json" 2>/dev/null && break
    sleep 0.1
  done
  idb=$(on_h1 "$AS" submit --root root b.json)
  for _ in $(seq 240); do kill -0 $serve_pid 2>/dev/null || break; sleep 1; done
  if kill -0 $serve_pid 2>/dev/null; then cat serve.log; on_h1 "$AS" status --root root; fail "the controller did not end within 240 s"; fi
  wait $serve_pid || { cat serve.log; fail "edp-autoscale serve failed"; }
  grep -E "started|rescaled|done|deferred" serve.log | sed 's/^edp-autoscale serve: //' | cut -c1-160
  on_h1 "$AS" status --root root
  python3 - root "$ida" "$idb" hosts <<'PY' || { cat serve.log; fail "serve across hosts"; }
import json, os, sys
root, a, b, hostfile = sys.argv[1:]
cap = {l.split()[0]: int(l.split()[1].split("=")[1]) for l in open(hostfile) if l.strip()}
jobs = {j["id"]: j for j in json.load(open(os.path.join(root, "jobs.json")))["jobs"]}
rescales, spanned = 0, False
for i, total in ((a, 12000), (b, 6000)):
    j = jobs[i]
    assert j["state"] == "done", f"{i}: {j['state']} {j['error']}"
    st = json.load(open(os.path.join(root, "jobs", i, "status.json")))
    assert st["samples_done"] == st["samples_total"] == total, f"{i}: {st['samples_done']} of {st['samples_total']} samples, expected {total}"
    for line in open(os.path.join(root, "jobs", i, "where")):
        size, rank, host, listed = line.split()
        assert host in listed.split(","), f"{i}: rank {rank} of {size} ran on {host}, not in its hostfile ({listed})"
        spanned |= len(set(listed.strip(",").split(","))) > 1
    ev = [json.loads(l) for l in open(os.path.join(root, "jobs", i, "events.jsonl"))]
    rescales += sum(e["event"] == "rescale" for e in ev)
    print(f"{i}: done, {st['samples_done']} samples, sizes {[e['workers'] for e in ev]}")
assert spanned, "no job ran on more than one host"
assert rescales >= 1, "no job was rescaled"
plans = [json.loads(l) for l in open(os.path.join(root, "decisions.jsonl"))]
for p in plans:
    for h, u in p["hosts"].items():
        assert u["slots"] == cap[h] and 0 <= u["used"] <= u["slots"], f"plan at {p['t']}: host {h} {u}"
print(f"ok: {rescales} rescale(s), {len(plans)} plans, no host over its slots")
PY
  for h in edp-h1 edp-h2 edp-h3; do
    left=$("$TC" pids "$h" | while read -r p; do tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null; echo; done | grep -E "edprun|orted|fashion" || true)
    [ -z "$left" ] || fail "left running on $h: $left"
  done
  ;;

slurm)
  need_cluster
  "$TC" slurm-check || exit 77  # prints why (no Slurm packages, no namespaces)
  # Nothing of Slurm outlives the test, whatever way it ends.
  trap '"$TC" slurm-down' EXIT
  "$TC" slurm-down  # a Slurm of its own: no job of anyone else's in the queue
  "$TC" slurm-up
  "$TC" slurm-up 2>&1 | grep -q "slurm already up" || fail "a second slurm-up did not find Slurm up"
  on_h1 sinfo
  sinfo_line=$(on_h1 sinfo -h -o '%P %a %D %t %N')
  [ "$sinfo_line" = "edp* up 3 idle edp-h[1-3]" ] || fail "sinfo: expected 'edp* up 3 idle edp-h[1-3]', got '$sinfo_line'"
  rm -rf "$WORK/slurm"; mkdir -p "$WORK/slurm"; cd "$WORK/slurm"
  # 1. Placement: a 3-node allocation with 2 tasks per node; edprun takes the hosts and slots from
  # SLURM_JOB_NODELIST (edp-h[1-3]) and SLURM_TASKS_PER_NODE (2(x3)), mpirun starts its orted on the
  # other nodes through srun, and each rank lands on its node, bound to its core.
  cat > probe.sbatch <<EOF
#!/bin/bash
#SBATCH --nodes=3 --ntasks-per-node=2 --output=probe.out --job-name=edp-probe
echo "allocation: \$SLURM_JOB_NODELIST, tasks per node \$SLURM_TASKS_PER_NODE, \$SLURM_NTASKS tasks"
# Open MPI starts its orted on the other nodes through srun by itself inside an allocation; the
# test makes sure: only its Slurm launcher is allowed, the cluster's rsh agent is not there.
unset OMPI_MCA_plm_rsh_agent
export OMPI_MCA_plm=slurm
"$EDPRUN" --dry-run -- "$PROBE" ok
PROBE_OUT=\$PWD/p "$EDPRUN" --mpirun-args "-x PROBE_OUT" -- "$PROBE" ok
EOF
  mkdir p
  on_h1 sbatch --wait probe.sbatch || { cat probe.out; fail "the probe job failed"; }
  cat probe.out
  grep -q "^allocation: edp-h\[1-3\], tasks per node 2(x3), 6 tasks$" probe.out || fail "the job's SLURM_* variables"
  grep -Eq "^  hosts +3 \(slurm\)$" probe.out || fail "dry run: not 3 hosts from Slurm"
  expect_ranks p "edp-h1 1" "edp-h1 1" "edp-h2 1" "edp-h2 1" "edp-h3 1" "edp-h3 1"

  # 2. Training: the MLP example on 3 nodes x 1 task, -np from SLURM_NTASKS. Same seed and world
  # size as a run on one host: the same test accuracy and final loss (tolerance 0: the reduction
  # order does not depend on where the ranks run).
  cat > train.sbatch <<EOF
#!/bin/bash
#SBATCH --nodes=3 --ntasks-per-node=1 --output=train.out --job-name=edp-mlp
"$EDPRUN" -- "$MLP" --epochs 1 --limit 1536 --threads 1 --seed 7
EOF
  on_h1 sbatch --wait train.sbatch || { cat train.out; fail "the training job failed"; }
  cat train.out
  js=$(grep '^{"model"' train.out) || fail "no JSON summary in train.out"
  [ "$(json_field "$js" world_size)" = 3 ] || fail "Slurm run: world size $(json_field "$js" world_size), expected 3"
  echo "edp-h1 slots=3" > hosts3x1
  j1=$(on_h1 "$EDPRUN" --hostfile hosts3x1 -np 3 -- "$MLP" --epochs 1 --limit 1536 --threads 1 --seed 7 | grep '^{"model"')
  echo "Slurm, 3 nodes: $js"; echo "1 host:         $j1"
  for k in world_size global_batch test_acc final_loss; do
    [ "$(json_field "$js" $k)" = "$(json_field "$j1" $k)" ] || fail "$k differs: Slurm $(json_field "$js" $k), 1 host $(json_field "$j1" $k)"
  done

  # 3. Elastic inside the allocation: 3 nodes x 1 task, started at 2 ranks; the job grows in place
  # onto the third node (mpirun starts its orted there through srun) and shrinks back, every
  # sample trained on once.
  mkdir -p rec
  cat > grow.sbatch <<EOF
#!/bin/bash
#SBATCH --nodes=3 --ntasks-per-node=1 --output=grow.out --job-name=edp-grow
"$EDPRUN" -np 2 --control-file \$PWD/rec/control.json -- "$SEQ" --plan 4:3,8:2 --settle-at 6 --record \$PWD/rec --limit 1000 --epochs 1
EOF
  on_h1 sbatch --wait grow.sbatch || { cat grow.out; fail "the elastic job failed"; }
  cat grow.out
  got=$(cat rec/where.* | sort -u | tr '\n' ';')
  want="size=2 rank=0 host=edp-h1;size=2 rank=1 host=edp-h2;size=3 rank=0 host=edp-h1;size=3 rank=1 host=edp-h2;size=3 rank=2 host=edp-h3;"
  [ "$got" = "$want" ] || fail "Slurm, in place: ranks ran on $got, expected $want"
  grep -q "^coverage: 1 epoch(s) x 1000 samples, each seen once (3 processes)$" grow.out || fail "Slurm, in place: coverage"
  grep -q "after 2 rescale(s) (2 in place, 0 by restart" grow.out || fail "Slurm, in place: not 2 rescales in place"

  # 4. GPU mode with the fake GPU tools inside the allocation (3 nodes x 2 tasks, one fake GPU per
  # node shared by 2 ranks through MPS), by restart: 4 -> 6 ranks starts edp-h3's daemon alone.
  mkdir -p gp
  echo '{"workers": 6}' > gp/ctl.json
  cat > mps.sbatch <<EOF
#!/bin/bash
#SBATCH --nodes=3 --ntasks-per-node=2 --output=mps.out --job-name=edp-mps
export PATH=$FAKE:\$PATH EDP_FAKE_LOG=\$PWD/gp/fake.log PROBE_OUT=\$PWD/gp EDP_RESCALE_MODE=restart
"$EDPRUN" -np 4 --ranks-per-gpu 2 --gpus 0 --mps on --control-file \$PWD/gp/ctl.json --mpirun-args "-x PROBE_OUT" -- "$PROBE" rescale 6 \$PWD/gp/ctl.json keep
EOF
  on_h1 sbatch --wait mps.sbatch || { cat mps.out; fail "the MPS job failed"; }
  grep '^edprun' mps.out
  grep -q "edprun: MPS daemons stopped on no host, started on edp-h3" mps.out || fail "Slurm, MPS: no start on edp-h3 alone"
  for h in edp-h1 edp-h2 edp-h3; do
    [ "$(grep -c "^start gpu=.* host=$h$" gp/fake.log)" = 1 ] || fail "Slurm, MPS: expected one MPS daemon started on $h"
    [ "$(grep -c "^quit-on host=$h " gp/fake.log)" = 1 ] || fail "Slurm, MPS: expected the MPS daemon of $h stopped on $h"
  done
  grep -q " host=edp-h3 cpus=" gp/rank.5 || fail "Slurm, MPS: rank 5 not on edp-h3: $(cat gp/rank.5)"

  # 5. An allocation smaller than asked: 3 task slots, -np 6. A clear error naming both, exit 2.
  set +e
  small=$(on_h1 salloc --nodes=3 --ntasks-per-node=1 "$EDPRUN" -np 6 -- "$MLP" --epochs 1 2>&1)
  rc=$?
  set -e
  echo "$small"
  [ $rc = 2 ] || fail "-np 6 in a 3-task allocation: exit $rc, expected 2"
  grep -q "edprun: error: -np 6 is more ranks than the Slurm allocation has task slots: 3 on 3 node(s) (job [0-9]*: edp-h\[1-3\], SLURM_TASKS_PER_NODE=1(x3))" <<<"$small" ||
    fail "no clear error for the too-small allocation"
  [ -z "$(on_h1 squeue -h)" ] || fail "jobs left in the queue: $(on_h1 squeue -h)"
  ;;

down)
  "$TC" down
  "$TC" down 2>&1 | grep -q "down (0 host(s) removed)" || fail "a second down was not a no-op"
  left=$(ip netns list | grep -E '^edp-h' || true)
  [ -z "$left" ] || fail "namespaces left: $left"
  left=$(ip -o link show | grep -E 'edp-(br0|h[0-9]+-v)' || true)
  [ -z "$left" ] || fail "links left: $left"
  [ ! -e "${EDP_TC_STATE:-/run/edp-testcluster}" ] || fail "state left in ${EDP_TC_STATE:-/run/edp-testcluster}"
  # A process of a host would sit in a network namespace other than ours.
  left=""
  for p in /proc/[0-9]*; do
    n=$(readlink "$p/ns/net" 2>/dev/null) || continue
    [ "$n" = "$(readlink /proc/self/ns/net)" ] || left+="${p#/proc/} $(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)"$'\n'
  done
  [ -z "$left" ] || fail "processes left in other network namespaces: $left"
  ;;
*) fail "unknown scenario $scenario" ;;
esac
echo "ok: $scenario"
