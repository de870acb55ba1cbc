# elastic::Job end to end under a real mpirun / edprun (tests/elastic/CMakeLists.txt):
#   inplace  2 -> 4 -> 1 -> 3 workers in place during epoch 1 (steps 5, 12, 20; the per-worker
#            batch of 32 kept, so the global batch goes 64 -> 128 -> 32 -> 96): every sample of
#            both epochs seen exactly once by the job (the program checks the records of all six
#            processes), each change's first step logged, replicas checked bitwise after each
#            change (the job throws otherwise); then one process with the same global-batch
#            schedule: test accuracy within 0.01 (1 point) of the in-place run — not bitwise,
#            since a sum over 4 ranks rounds differently from one over 1. Then a grow 2 -> 4 asked
#            for in the last step of epoch 1, and one in the job's last step: coverage again.
#   restart  the same sequence by restart (EDP_RESCALE_MODE=restart) under edprun (planning with
#            4 cores, so that it allows 4 workers on this 2-core machine): the same
#            coverage, each change logged "by restart".
#   kill     rank 1 of 2 is killed (SIGKILL) before step 17 under edprun --max-restarts 1, with a
#            checkpoint every 5 steps: the job restarts from step 15 and ends with parameters
#            bitwise equal to an uninterrupted run that committed at the same steps.
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
function(json_field res key out_var)
  if(NOT res MATCHES "\"${key}\": \"?([0-9a-f.]+)")
    message(FATAL_ERROR "no ${key} in:\n${res}")
  endif()
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

set(plan 5:4,12:1,20:3)
if(MODE STREQUAL "inplace")
  file(MAKE_DIRECTORY ${WORK}/a ${WORK}/b)
  run(a ${MPIEXEC} --oversubscribe -np 2 -x EDP_EVENTS_FILE=${WORK}/a/events.jsonl ${EXE} --plan ${plan} --record ${WORK}/a)
  expect("${a}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(6 processes\\)"
    "first step at 4 worker\\(s\\) done[^\n]*\\(in place\\)" "first step at 1 worker\\(s\\) done[^\n]*\\(in place\\)"
    "first step at 3 worker\\(s\\) done[^\n]*\\(in place\\)" "\"workers\": 3, \"global_batch\": 96")
  file(STRINGS ${WORK}/a/events.jsonl ev REGEX "\"mode\":\"in_place\"")
  list(LENGTH ev n)
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "expected 3 in-place rescale events in events.jsonl, found ${n}")
  endif()
  run(b ${MPIEXEC} -np 1 ${EXE} --plan 5:1:128,12:1:32,20:1:96 --batch 64 --record ${WORK}/b)
  expect("${b}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once" "\"workers\": 1, \"global_batch\": 96")
  json_field("${a}" test_acc acc_a)
  json_field("${b}" test_acc acc_b)
  string(REPLACE "." "" ia "${acc_a}")
  string(REPLACE "." "" ib "${acc_b}")
  math(EXPR diff "${ia} - ${ib}")
  if(diff GREATER 100 OR diff LESS -100)
    message(FATAL_ERROR "test accuracy ${acc_a} in place vs ${acc_b} at a fixed size: more than 1 point apart")
  endif()
  message(STATUS "in place: test acc ${acc_a}; one process, same global batches: ${acc_b}")
  # A grow asked for in the last step of an epoch (3000 samples at 64: step 47 ends epoch 1) and
  # in the job's very last step (94): the new ranks finish the epoch with the others (its
  # collective) instead of starting the next one — which once left rank 0 in the epoch's
  # allreduce and the new ranks in the next epoch's backward, forever.
  foreach(last 47 94)
    file(MAKE_DIRECTORY ${WORK}/end${last})
    run(e ${MPIEXEC} --oversubscribe -np 2 -x EDP_COMM_TIMEOUT=60 ${EXE} --plan ${last}:4 --record ${WORK}/end${last})
    expect("${e}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once \\(4 processes\\)"
      "\"workers\": 4, \"global_batch\": 128")
  endforeach()
elseif(MODE STREQUAL "restart")
  run(r ${CMAKE_COMMAND} -E env EDP_RESCALE_MODE=restart
      ${EDPRUN} --allow-run-as-root --oversubscribe --cores-per-host 4 --bind-to none -np 2 --control-file ${WORK}/control.json --
      ${EXE} --plan ${plan} --record ${WORK} --ckpt ${WORK}/ckpt)
  expect("${r}" "coverage: 2 epoch\\(s\\) x 3000 samples, each seen once"
    "first step at 4 worker\\(s\\) done[^\n]*\\(by restart\\)" "first step at 1 worker\\(s\\) done[^\n]*\\(by restart\\)"
    "first step at 3 worker\\(s\\) done[^\n]*\\(by restart\\)" "\"workers\": 3, \"global_batch\": 96")
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
else()
  message(FATAL_ERROR "MODE must be inplace, restart or kill")
endif()
