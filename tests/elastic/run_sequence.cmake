# elastic::Job end to end under a real mpirun / edprun (tests/elastic/CMakeLists.txt):
#   inplace  2 -> 4 -> 1 -> 3 workers in place during epoch 1 (steps 5, 12, 20; the per-worker
#            batch of 32 kept, so the global batch goes 64 -> 128 -> 32 -> 96): every sample of
#            both epochs seen exactly once by the job (the program checks the records of all six
#            processes), each change's first step logged, replicas checked bitwise after each
#            change (the job throws otherwise), log lines prefixed with the rank in the job (not
#            in MPI's world); then one process with the same global-batch
#            schedule: test accuracy within 0.01 (1 point) of the in-place run — not bitwise,
#            since a sum over 4 ranks rounds differently from one over 1. Then a grow 2 -> 4 asked
#            for in the last step of epoch 1, and one in the job's last step: coverage again.
#   restart  the same sequence by restart (EDP_RESCALE_MODE=restart) under edprun (planning with
#            4 cores, so that it allows 4 workers on this 2-core machine): the same
#            coverage, each change logged "by restart".
#   background  a grow in the background (the default): 2 -> 4 asked for at step 5, the new ranks
#            start while the job trains on and join when ready (the program waits for them before
#            step 30: Job::settle), then 4 -> 1 at step 35 and 1 -> 3 at step 40, whose ranks join
#            whenever they are ready (at the end of the job at the latest): every sample of both
#            epochs seen exactly once; the rescale event shows the background phase. Then a grow
#            whose new ranks fail during their setup (three times: the request is tried again after
#            2 and 4 looks, then given up): the job goes on at its size and ends normally, every
#            sample seen once, nothing left running. Then a grow whose spawn does not return (the
#            new ranks never start MPI): given up after EDP_SPAWN_TIMEOUT, the job trains on at its
#            size (the request tried again is refused in place) and ends its work, every sample seen
#            once; its processes then end with exit code 76, so that mpirun stops the stuck ones
#            and ends, nothing left running.
#   slowpath without edp's shared memory (EDP_HOST_SHM=off) under edprun, a grow 2 -> 4 at step 5:
#            paced to last about 14 s, auto mode grows by restart (the rest of the run repays it);
#            unpaced, it grows in place and warns that the new ranks are on a slower path.
#   kill     rank 1 of 2 is killed (SIGKILL) before step 17 under edprun --max-restarts 1, with a
#            checkpoint every 5 steps: the job restarts from step 15 and ends with parameters
#            bitwise equal to an uninterrupted run that committed at the same steps.
#   gpt      the tiny GPT on token windows (--model gpt): 2 -> 4 -> 1 -> 3 workers in place, every
#            window of both epochs seen exactly once, every new rank warmed up before it joined; then, under edprun with bfloat16 products
#            where the CPU has them (EDP_BF16=1), rank 1 of 2 killed before step 17 and the job
#            restarted from its step-15 checkpoint ends bitwise equal to an uninterrupted run.
#   zero     the inplace sequence with the optimizer state sharded (--zero 1, and --zero 2; the state resharded
#            rank to rank at each change) and not: coverage, the same final parameters bitwise; the
#            sharded checkpoint has one part per rank; resumed for a third epoch at 3, 2 and 4
#            ranks, sharded (--zero 1 or 2) or not, from the sharded and from the unsharded checkpoint: pairs with
#            the same state and size end bitwise equal; a part cut short makes the job resume from
#            the checkpoint before; a part with other bytes stops it, naming the part; a rank
#            killed in a shrink's reshard (EDP_FAULT) under edprun: the job restarts from its last
#            checkpoint and ends at the new size.
#   gpu      the inplace sequence with every rank on the GPU (--device cuda; ranks share it: the
#            colocated communicator, rebuilt after each change): coverage, replicas checked, and
#            test accuracy within 1 point of the same sequence on the CPU; the same sharded
#            (--zero 1 and --zero 2: the parts moved at each change). Skipped without a GPU.
# Variables: MODE, MPIEXEC, EDPRUN, EXE, WORK.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 280)
  set(${out_var} "${rc}|${out}|${err}" PARENT_SCOPE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "exit ${rc}: ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
function(expect res)
  foreach(pattern ${ARGN})
    if(NOT res MATCHES "${pattern}")
      message(FATAL_ERROR "output does not match '${pattern}':\n${res}")
    endif()
  endforeach()
endfunction()
# Test accuracies of two runs within 1 point (0.01) of each other.
function(within_one_point res_a res_b what)
  json_field("${res_a}" test_acc acc_a)
  json_field("${res_b}" test_acc acc_b)
  string(REPLACE "." "" ia "${acc_a}")
  string(REPLACE "." "" ib "${acc_b}")
  math(EXPR diff "${ia} - ${ib}")
  if(diff GREATER 100 OR diff LESS -100)
    message(FATAL_ERROR "test accuracy ${acc_a} vs ${acc_b} (${what}): more than 1 point apart")
  endif()
  message(STATUS "test accuracy ${acc_a} vs ${acc_b} (${what})")
endfunction()
function(json_field res key out_var)
  if(NOT res MATCHES "\"${key}\": \"?([0-9a-f.]+)")
    message(FATAL_ERROR "no ${key} in:\n${res}")
  endif()
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

set(plan 5:4,12:1,20:3)
if(MODE STREQUAL "inplace")
  file(MAKE_DIRECTORY ${WORK}/a ${WORK}/b)
  # The changes at exactly the planned steps (the grows wait for their new ranks at the request:
  # EDP_BACKGROUND_GROW=0), so that one process can follow the same global-batch schedule.
  run(a ${MPIEXEC} --oversubscribe -np 2 -x EDP_EVENTS_FILE=${WORK}/a/events.jsonl -x EDP_BACKGROUND_GROW=0 ${EXE}
    --plan ${plan} --record ${WORK}/a)
  expect("${a}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(6 processes\\)"
    "first step at 4 worker\\(s\\) done[^\n]*\\(in place\\)" "first step at 1 worker\\(s\\) done[^\n]*\\(in place\\)"
    "first step at 3 worker\\(s\\) done[^\n]*\\(in place\\)" "\"workers\": 3, \"global_batch\": 96"
    # The ranks a grow spawned and those started by mpirun share edp's shared memory.
    "4 ranks, gradients over same host, same launch: edp shared memory; same host, separate launches \\(a grow's spawn\\): edp shared memory"
    "3 ranks, gradients over [^\n]*separate launches \\(a grow's spawn\\): edp shared memory")
  file(STRINGS ${WORK}/a/events.jsonl ev REGEX "\"mode\":\"in_place\"")
  list(LENGTH ev n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "expected 3 in-place rescale events in events.jsonl, found ${n}")
  endif()
  run(b ${MPIEXEC} -np 1 ${EXE} --plan 5:1:128,12:1:32,20:1:96 --batch 64 --record ${WORK}/b)
  expect("${b}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once" "\"workers\": 1, \"global_batch\": 96")
  within_one_point("${a}" "${b}" "in place vs one process with the same global batches")
  # A grow asked for in the last step of an epoch (3000 samples at 64: step 47 ends epoch 1) and
  # in the job's very last step (94): the new ranks finish the epoch with the others (its
  # collective) instead of starting the next one — which once left rank 0 in the epoch's
  # allreduce and the new ranks in the next epoch's backward, forever.
  foreach(last 47 94)
    file(MAKE_DIRECTORY ${WORK}/end${last})
    run(e ${MPIEXEC} --oversubscribe -np 2 -x EDP_COMM_TIMEOUT=60 -x EDP_BACKGROUND_GROW=0 ${EXE} --plan ${last}:4
      --record ${WORK}/end${last})
    expect("${e}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(4 processes\\)"
      "\"workers\": 4, \"global_batch\": 128")
  endforeach()
elseif(MODE STREQUAL "zero")
  # The inplace sequence with the optimizer state sharded (--zero 1) and not, each committing a
  # checkpoint at every epoch's end: coverage, replicas checked after each change, and the final
  # parameters bitwise equal (every element's gradient is summed in rank order by edp's shared
  # memory in the reduce-scatter as in the allreduce, and SGD is elementwise).
  file(MAKE_DIRECTORY ${WORK}/z ${WORK}/u)
  run(z ${MPIEXEC} --oversubscribe -np 2 -x EDP_BACKGROUND_GROW=0 ${EXE} --plan ${plan} --zero 1 --ckpt ${WORK}/z/ck
    --record ${WORK}/z)
  expect("${z}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(6 processes\\)"
    "first step at 4 worker\\(s\\) done[^\n]*\\(in place\\)" "first step at 1 worker\\(s\\) done[^\n]*\\(in place\\)"
    "\"workers\": 3, \"global_batch\": 96")
  run(u ${MPIEXEC} --oversubscribe -np 2 -x EDP_BACKGROUND_GROW=0 ${EXE} --plan ${plan} --zero 0 --ckpt ${WORK}/u/ck
    --record ${WORK}/u)
  # Sharded gradients too (--zero 2): the same copies and the same reductions as --zero 1.
  file(MAKE_DIRECTORY ${WORK}/z2)
  run(z2 ${MPIEXEC} --oversubscribe -np 2 -x EDP_BACKGROUND_GROW=0 ${EXE} --plan ${plan} --zero 2 --ckpt ${WORK}/z2/ck
    --record ${WORK}/z2)
  expect("${z2}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(6 processes\\)"
    "\"workers\": 3, \"global_batch\": 96")
  json_field("${z}" digest dz)
  json_field("${z2}" digest dz2)
  json_field("${u}" digest du)
  if(NOT dz STREQUAL du OR NOT dz2 STREQUAL du)
    message(FATAL_ERROR "sharded (--zero 1, --zero 2) and unsharded runs of the same sequence end with other "
      "parameters: ${dz}, ${dz2} vs ${du}")
  endif()
  message(STATUS "sharded (--zero 1 and 2) and unsharded: the same parameters (digest ${dz})")
  # The sharded job's checkpoints are sharded: each of the final 3 ranks wrote its part beside it.
  file(GLOB cks ${WORK}/z/ck/ckpt-*.edp)
  list(SORT cks)
  list(GET cks -1 last)
  file(GLOB parts ${last}.shard-*)
  list(LENGTH parts nparts)
  if(NOT nparts EQUAL 3 OR NOT EXISTS ${last}.shard-2-of-3)
    message(FATAL_ERROR "the sharded job's last checkpoint ${last} has ${nparts} parts, not 3: ${parts}")
  endif()
  # Resumed at another size, sharded or not, from the sharded and from the unsharded checkpoint:
  # each pair continues with the same state at the same size, so their parameters are bitwise
  # equal (sharded and unsharded runs of one size are, on one host).
  foreach(case "z;0;3;u;0" "z;1;2;u;0" "u;1;4;z;1" "u;2;3;z;0")
    list(GET case 0 ck_a)
    list(GET case 1 zero_a)
    list(GET case 2 np)
    list(GET case 3 ck_b)
    list(GET case 4 zero_b)
    foreach(side a b)
      set(d ${WORK}/resume_${ck_${side}}${zero_${side}}_${np}_${side})
      file(REMOVE_RECURSE ${d})
      file(MAKE_DIRECTORY ${d})
      file(COPY ${WORK}/${ck_${side}}/ck DESTINATION ${d})
      run(r_${side} ${MPIEXEC} --oversubscribe -np ${np} ${EXE} --zero ${zero_${side}} --epochs 3 --ckpt ${d}/ck
        --record ${d} --no-coverage)
      expect("${r_${side}}" "resumed from [^\n]*ckpt-[0-9]+.edp" "\"workers\": ${np}")
      json_field("${r_${side}}" digest dig_${side})
    endforeach()
    if(NOT dig_a STREQUAL dig_b)
      message(FATAL_ERROR "resumed at ${np} ranks: the ${ck_a} checkpoint with --zero ${zero_a} and the ${ck_b} one "
        "with --zero ${zero_b} end with other parameters: ${dig_a} vs ${dig_b}")
    endif()
    message(STATUS "resumed at ${np} ranks, ${ck_a} checkpoint --zero ${zero_a} = ${ck_b} checkpoint --zero ${zero_b} (${dig_a})")
  endforeach()
  # A part cut short: latest() skips that checkpoint (naming the part) for the one before it.
  # A part of the right size with other bytes: the job stops, naming the part.
  set(d ${WORK}/damaged)
  file(REMOVE_RECURSE ${d})
  file(MAKE_DIRECTORY ${d})
  file(COPY ${WORK}/z/ck DESTINATION ${d})
  get_filename_component(name ${last} NAME)
  execute_process(COMMAND truncate -s -1 ${d}/ck/${name}.shard-1-of-3)
  run(t ${MPIEXEC} --oversubscribe -np 2 ${EXE} --zero 1 --epochs 3 --ckpt ${d}/ck --record ${d} --no-coverage)
  expect("${t}" "skipping damaged checkpoint: [^\n]*${name}: its part [^\n]*shard-1-of-3 has [0-9]+ bytes"
    "resumed from [^\n]*ckpt-[0-9]+.edp")
  file(REMOVE_RECURSE ${d})
  file(MAKE_DIRECTORY ${d})
  file(COPY ${WORK}/z/ck DESTINATION ${d})
  execute_process(COMMAND dd if=/dev/zero of=${d}/ck/${name}.shard-0-of-3 bs=1 count=8 seek=64 conv=notrunc
    OUTPUT_QUIET ERROR_QUIET)
  execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${EXE} --zero 1 --epochs 3 --ckpt ${d}/ck --record ${d}
    --no-coverage RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "shard-0-of-3: not the part [^\n]* was written with")
    message(FATAL_ERROR "a part with other bytes was not refused (exit ${rc}):\n${out}\n${err}")
  endif()
  # A rank lost while the state moves: rank 1 of 3 dies in the shrink 3 -> 2's reshard, its part
  # packed and not sent. edprun restarts the job from its last checkpoint (step 10); the job
  # shrinks again and ends at 2 workers, its test accuracy within a point of the run not killed.
  set(d ${WORK}/lost)
  file(MAKE_DIRECTORY ${d}/a ${d}/b)
  set(common --no-coverage --zero 1 --ckpt-every 5 --limit 2000 --plan 12:2)
  run(la ${EDPRUN} --allow-run-as-root --oversubscribe -np 3 -- ${EXE} ${common} --record ${d}/a --ckpt ${d}/a/ck)
  run(lb ${EDPRUN} --allow-run-as-root --oversubscribe -np 3 --max-restarts 1 --restart-backoff 0 --
      ${EXE} ${common} --die-in-reshard 1 --record ${d}/b --ckpt ${d}/b/ck)
  expect("${lb}" "rank 1 kills itself in the reshard" "restart 1 of 1"
    "resumed from [^\n]*ckpt-000000000010.edp: step 10" "first step at 2 worker\\(s\\) done[^\n]*\\(in place\\)"
    "\"workers\": 2")
  within_one_point("${la}" "${lb}" "a rank lost in the reshard, restarted from the checkpoint, vs not")
elseif(MODE STREQUAL "gpu")
  file(MAKE_DIRECTORY ${WORK}/g ${WORK}/c)
  execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 -x EDP_BACKGROUND_GROW=0 ${EXE} --device cuda --plan ${plan}
    --record ${WORK}/g RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 280)
  if(out MATCHES "elastic_sequence: skipped, no GPU: ([^\n]*)")
    message(STATUS "SKIPPED: no GPU: ${CMAKE_MATCH_1}")
    return()
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "exit ${rc}: the sequence on the GPU\n${out}\n${err}")
  endif()
  set(g "${rc}|${out}|${err}")
  expect("${g}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(6 processes\\)"
    "first step at 4 worker\\(s\\) done[^\n]*\\(in place\\)" "first step at 1 worker\\(s\\) done[^\n]*\\(in place\\)"
    "\"workers\": 3, \"global_batch\": 96")
  run(c ${MPIEXEC} --oversubscribe -np 2 -x EDP_BACKGROUND_GROW=0 ${EXE} --plan ${plan} --record ${WORK}/c)
  within_one_point("${g}" "${c}" "the sequence on the GPU vs the same on the CPU")
  # Sharded on the GPU: the parts move between the ranks (through host memory) at every change;
  # --zero 2: the gradients too (buffers on the device made and freed every backward).
  foreach(z 1 2)
    file(MAKE_DIRECTORY ${WORK}/gz${z})
    run(gz ${MPIEXEC} --oversubscribe -np 2 -x EDP_BACKGROUND_GROW=0 ${EXE} --device cuda --zero ${z} --plan ${plan}
      --record ${WORK}/gz${z})
    expect("${gz}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(6 processes\\)"
      "\"workers\": 3, \"global_batch\": 96")
    within_one_point("${gz}" "${c}" "the sequence on the GPU, --zero ${z}, vs unsharded on the CPU")
  endforeach()
elseif(MODE STREQUAL "background")
  file(MAKE_DIRECTORY ${WORK}/a ${WORK}/b)
  run(a ${MPIEXEC} --oversubscribe -np 2 -x EDP_EVENTS_FILE=${WORK}/a/events.jsonl ${EXE} --plan 5:4,35:1,40:3
    --settle-at 30 --record ${WORK}/a)
  expect("${a}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once" "starting 2 new rank\\(s\\); the job trains on at 2"
    "first step at 4 worker\\(s\\) done[^\n]*\\(in place\\)")
  file(STRINGS ${WORK}/a/events.jsonl ev REGEX "\"from_workers\":2,\"workers\":4,.*\"background_s\":[0-9.e-]+,\"state_s\"")
  list(LENGTH ev n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one 2 -> 4 rescale event with a background phase in events.jsonl")
  endif()
  run(b ${MPIEXEC} --oversubscribe -np 2 ${EXE} --plan 5:4 --new-rank-fails --record ${WORK}/b)
  expect("${b}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(2 processes\\)"
    "a rank started by a grow failed before it joined the job: elastic_sequence: this new rank fails"
    "the grow failed and left the job as it was" "\"workers\": 2, \"global_batch\": 64")
  execute_process(COMMAND pgrep -f "${EXE} --plan 5:4 --new-rank-fails" RESULT_VARIABLE left OUTPUT_VARIABLE pids)
  if(left EQUAL 0)
    message(FATAL_ERROR "processes of the failed grow are left running: ${pids}")
  endif()
  file(MAKE_DIRECTORY ${WORK}/c)
  execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 -x EDP_SPAWN_TIMEOUT=3 -x EDP_MIN_STEP_MS=60 ${EXE}
    --plan 5:4 --new-rank-hangs --record ${WORK}/c RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 280)
  if(NOT rc EQUAL 76)
    message(FATAL_ERROR "a grow whose spawn does not return: exit ${rc}, not 76\n${out}\n${err}")
  endif()
  expect("${out}|${err}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(2 processes\\)"
    "the new ranks did not start within 3 s \\(EDP_SPAWN_TIMEOUT\\)" "does not start new ranks in place again"
    "still stuck in their MPI initialisation" "\"workers\": 2, \"global_batch\": 64")
  execute_process(COMMAND pgrep -f "${EXE} --plan 5:4 --new-rank-hangs" RESULT_VARIABLE left OUTPUT_VARIABLE pids)
  if(left EQUAL 0)
    message(FATAL_ERROR "processes of the grow given up are left running: ${pids}")
  endif()
elseif(MODE STREQUAL "restart")
  run(r ${CMAKE_COMMAND} -E env EDP_RESCALE_MODE=restart
      ${EDPRUN} --allow-run-as-root --oversubscribe --cores-per-host 4 --bind-to none -np 2 --control-file ${WORK}/control.json --
      ${EXE} --plan ${plan} --record ${WORK} --ckpt ${WORK}/ckpt)
  expect("${r}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once"
    "first step at 4 worker\\(s\\) done[^\n]*\\(by restart\\)" "first step at 1 worker\\(s\\) done[^\n]*\\(by restart\\)"
    "first step at 3 worker\\(s\\) done[^\n]*\\(by restart\\)" "\"workers\": 3, \"global_batch\": 96")
elseif(MODE STREQUAL "slowpath")
  # Without edp's shared memory (EDP_HOST_SHM=off) the ranks a grow spawns talk to the running ones
  # over TCP, a slower path than a start at the grown size gives. Auto mode grows by restart when
  # the rest of the run repays it (paced to about 14 s: EDP_MIN_STEP_MS), and a short job grows in
  # place (waiting for its new ranks at the request: EDP_BACKGROUND_GROW=0) and says what it runs on.
  file(MAKE_DIRECTORY ${WORK}/long ${WORK}/short)
  foreach(case long short)
    set(pace 0)
    set(background 0)  # the short job would end before new ranks started in the background join it
    if(case STREQUAL "long")
      set(pace 150)
      set(background 1)
    endif()
    run(r ${CMAKE_COMMAND} -E env EDP_HOST_SHM=off EDP_MIN_STEP_MS=${pace} EDP_BACKGROUND_GROW=${background}
        ${EDPRUN} --allow-run-as-root --oversubscribe --cores-per-host 4 --bind-to none -np 2
        --control-file ${WORK}/${case}/control.json -- ${EXE} --plan 5:4 --record ${WORK}/${case} --ckpt ${WORK}/${case}/ckpt)
    expect("${r}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once" "\"workers\": 4, \"global_batch\": 128")
    if(case STREQUAL "long")
      expect("${r}" "growing by restart: ranks started by an in-place grow would exchange gradients"
        "first step at 4 worker\\(s\\) done[^\n]*\\(by restart\\)")
    else()
      expect("${r}" "first step at 4 worker\\(s\\) done[^\n]*\\(in place\\)"
        "separate launches \\(a grow's spawn\\): MPI \\(Open MPI 4.1: TCP on loopback\\)"
        "exchange gradients over a slower path than a start at this size would give them")
    endif()
  endforeach()
elseif(MODE STREQUAL "kill")
  file(MAKE_DIRECTORY ${WORK}/a ${WORK}/b)
  set(common --no-coverage --ckpt-every 5 --limit 2000)
  run(a ${EDPRUN} --allow-run-as-root --oversubscribe -np 2 -- ${EXE} ${common} --record ${WORK}/a --ckpt ${WORK}/a/ckpt)
  run(b ${EDPRUN} --allow-run-as-root --oversubscribe -np 2 --max-restarts 1 --restart-backoff 0 --
      ${EXE} ${common} --die-at 17 --record ${WORK}/b --ckpt ${WORK}/b/ckpt)
  expect("${b}" "rank 1 kills itself before step 17" "restart 1 of 1"
    "resumed from [^\n]*ckpt-000000000015.edp: step 15")
  json_field("${a}" digest da)
  json_field("${b}" digest db)
  if(NOT da STREQUAL db)
    message(FATAL_ERROR "after the crash and restart the parameters differ from the uninterrupted run: ${db} vs ${da}")
  endif()
  message(STATUS "killed and restarted: parameters bitwise equal (${da})")
elseif(MODE STREQUAL "gpt")
  file(MAKE_DIRECTORY ${WORK}/a ${WORK}/b ${WORK}/c)
  set(gpt --model gpt --limit 400 --batch 8)
  run(a ${MPIEXEC} --oversubscribe -np 2 -x EDP_BACKGROUND_GROW=0 -x EDP_LOG_LEVEL=debug ${EXE} ${gpt} --plan ${plan}
    --record ${WORK}/a)
  # The new ranks warm up on token windows too (int32 features), before they join.
  if(a MATCHES "no warm-up for this new rank: ([^\n]*)")
    message(FATAL_ERROR "a new rank of the GPT did not warm up: ${CMAKE_MATCH_1}")
  endif()
  expect("${a}" "coverage: 2 epoch\\(s\\) x 400 samples, each seen once \\(6 processes\\)"
    "first step at 4 worker\\(s\\) done[^\n]*\\(in place\\)" "first step at 1 worker\\(s\\) done[^\n]*\\(in place\\)"
    "\"workers\": 3, \"global_batch\": 24")
  if(EDPRUN)
    set(common ${gpt} --no-coverage --ckpt-every 5)
    run(b ${CMAKE_COMMAND} -E env EDP_BF16=1 ${EDPRUN} --allow-run-as-root --oversubscribe -np 2 --
        ${EXE} ${common} --record ${WORK}/b --ckpt ${WORK}/b/ckpt)
    run(c ${CMAKE_COMMAND} -E env EDP_BF16=1 ${EDPRUN} --allow-run-as-root --oversubscribe -np 2 --max-restarts 1
        --restart-backoff 0 -- ${EXE} ${common} --die-at 17 --record ${WORK}/c --ckpt ${WORK}/c/ckpt)
    expect("${c}" "rank 1 kills itself before step 17" "resumed from [^\n]*ckpt-000000000015.edp: step 15")
    json_field("${b}" digest db)
    json_field("${c}" digest dc)
    if(NOT db STREQUAL dc)
      message(FATAL_ERROR "GPT: after the crash and restart the parameters differ from the uninterrupted run: ${dc} vs ${db}")
    endif()
    message(STATUS "GPT killed and restarted: parameters bitwise equal (${db})")
  endif()
else()
  message(FATAL_ERROR "MODE must be inplace, background, restart, slowpath, kill, gpt, zero or gpu")
endif()
