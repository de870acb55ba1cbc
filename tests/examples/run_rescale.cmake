# A rescale end to end, started the way users start it: edprun -np 2 --control-file F runs the
# MLP; F asks for 1 worker at global batch 64, so at step 5 (--control-every 5) rank 0 notices,
# every rank commits one checkpoint and exits 75, and edprun starts the job again on 1 rank,
# which resumes 640 samples into epoch 1. No sample is lost or repeated: 2000 samples give 5
# steps of 128, then ceil(1360 / 64) = 22 steps of 64, then ceil(2000 / 64) = 32, so the
# final checkpoint is step 59. Then the reverse (1 -> 2 workers, per-worker batch kept). Last,
# edprun --max-restarts: a program that fails twice is started three times.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
function(edprun_run out_var)
  execute_process(COMMAND ${EDPRUN} --allow-run-as-root --oversubscribe ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 250)
  set(${out_var} "${rc}|${out}|${err}" PARENT_SCOPE)
endfunction()
function(expect res rc_want)
  string(FIND "${res}" "|" bar)
  string(SUBSTRING "${res}" 0 ${bar} rc)
  if(NOT rc EQUAL rc_want)
    message(FATAL_ERROR "exit ${rc}, expected ${rc_want}\n${res}")
  endif()
  foreach(pattern ${ARGN})
    if(NOT res MATCHES "${pattern}")
      message(FATAL_ERROR "output does not match '${pattern}':\n${res}")
    endif()
  endforeach()
endfunction()

file(WRITE ${WORK}/control.json "{\"workers\": 1, \"global_batch\": 64}")
set(train ${EXE} --limit 2000 --epochs 2 --threads 1 --no-eval --checkpoint-dir ${WORK}/ckpt --control-every 5)
edprun_run(r1 -np 2 --control-file ${WORK}/control.json -- ${train})
expect("${r1}" 0
  "rescale requested at step 5: 2 -> 1 worker\\(s\\), global batch 128 -> 64"
  "edprun: rescale 1: 2 -> 1 rank\\(s\\)"
  "resumed from [^\n]*ckpt-000000000005.edp: step 5, epoch 1, 640 samples into it \\(saved by 2 rank"
  "\"world_size\": 1, [^\n]*\"global_batch\": 64")
if(NOT EXISTS ${WORK}/ckpt/ckpt-000000000059.edp)
  file(GLOB got ${WORK}/ckpt/*)
  message(FATAL_ERROR "expected the final checkpoint at step 59 (no sample lost or repeated), found: ${got}")
endif()

# Growing: 1 -> 2 workers, no global batch given, so the per-worker batch 64 stays (global 128).
file(REMOVE_RECURSE ${WORK}/ckpt)
file(WRITE ${WORK}/control.json "{\"workers\": 2}")
edprun_run(r2 -np 1 --control-file ${WORK}/control.json -- ${train})
expect("${r2}" 0
  "rescale requested at step 5: 1 -> 2 worker\\(s\\), global batch 64 -> 128"
  "edprun: rescale 1: 1 -> 2 rank\\(s\\)"
  "\"world_size\": 2, [^\n]*\"global_batch\": 128")

# Restarts after failures, with backoff: fails twice, then succeeds.
# (no ';' in the script: CMake would split the argument there)
set(flaky sh -c "n=$(cat ${WORK}/count 2>/dev/null || echo 0) && echo $((n+1)) > ${WORK}/count && [ $n -ge 2 ]")
edprun_run(r3 -np 1 --max-restarts 2 --restart-backoff 0 -- ${flaky})
expect("${r3}" 0 "restart 1 of 2" "restart 2 of 2")
file(REMOVE ${WORK}/count)
edprun_run(r4 -np 1 --max-restarts 1 --restart-backoff 0 -- ${flaky})
expect("${r4}" 1 "restart 1 of 1")
