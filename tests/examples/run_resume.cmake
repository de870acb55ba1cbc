# Nothing is lost when a job stops: run A trains 2 epochs uninterrupted, committing a checkpoint
# every 4 steps; run B is the same job stopped after step 10 (--stop-after-steps, exit 3) and
# started again with the same command, which resumes from the step-8 checkpoint. The last
# checkpoints of A and B (parameters, momentum buffers, step count, sampler position, metadata)
# must be byte-identical files. A resume with another learning rate — a change of the job's
# identity — is refused naming it; then B is resumed once more at another world size (NP2) with one
# more epoch (a run setting: no --accept-config-change needed): it must load that checkpoint, say
# so, and commit during the third epoch. Run under
# mpirun with NP ranks when NP > 1. (1000 samples: 16 steps per epoch at 1 rank, 8 at 2.)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
function(run np dir extra out_var)
  set(cmd ${EXE} --limit 1000 --threads 1 --no-eval --checkpoint-dir ${dir} --checkpoint-every 4 ${extra})
  if(np GREATER 1)
    set(cmd ${MPIEXEC} --oversubscribe --bind-to none -np ${np} ${cmd})
  endif()
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 250)
  set(${out_var} "${rc}|${out}|${err}" PARENT_SCOPE)
endfunction()
function(expect_rc res want what)
  string(FIND "${res}" "|" bar)
  string(SUBSTRING "${res}" 0 ${bar} rc)
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "${what}: exit ${rc}, expected ${want}\n${res}")
  endif()
endfunction()

# Runs, expects exit 0 and stderr matching `pattern` (what the resumed run says it loaded).
function(expect_resume np dir extra pattern what)
  run(${np} ${dir} "${extra}" res)
  expect_rc("${res}" 0 "${what}")
  if(NOT res MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: did not say it resumed as expected (${pattern}):\n${res}")
  endif()
endfunction()

run(${NP} ${WORK}/a "--epochs;2" ra)
expect_rc("${ra}" 0 "uninterrupted run")
run(${NP} ${WORK}/b "--epochs;2;--stop-after-steps;10" rb1)
expect_rc("${rb1}" 3 "stopped run")
expect_resume(${NP} ${WORK}/b "--epochs;2" "resumed from [^\n]*ckpt-000000000008.edp: step 8" "resumed run")
file(GLOB ca ${WORK}/a/ckpt-*.edp)
list(LENGTH ca na)
if(NOT na EQUAL 2)
  message(FATAL_ERROR "expected 2 kept checkpoints in ${WORK}/a, found: ${ca}")
endif()
list(SORT ca)
list(GET ca -1 last_a)
get_filename_component(last_name ${last_a} NAME)
string(REGEX REPLACE "^ckpt-0*([0-9]+)\\.edp$" "\\1" last_step ${last_name})
math(EXPR want_last "16 * 2 / ${NP}")
if(NOT last_step EQUAL want_last)
  message(FATAL_ERROR "the uninterrupted run's last checkpoint is ${last_name}, expected step ${want_last}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${last_a} ${WORK}/b/${last_name} RESULT_VARIABLE same)
if(NOT same EQUAL 0)
  message(FATAL_ERROR "the resumed run's final checkpoint ${WORK}/b/${last_name} differs from the uninterrupted run's")
endif()
# A change of the training itself (the learning rate) is another training run: refused, naming
# the setting and the flag that accepts it.
run(${NP2} ${WORK}/b "--epochs;2;--lr;0.2" rc3)
string(FIND "${rc3}" "|" bar)
string(SUBSTRING "${rc3}" 0 ${bar} rc3_code)
if(rc3_code EQUAL 0 OR NOT rc3 MATCHES "written by a job with another configuration:[^|]*--lr: '[^']*' in the checkpoint, '0.2' now[^|]*--accept-config-change")
  message(FATAL_ERROR "a resume with another --lr was not refused naming it:\n${rc3}")
endif()
# Training longer (one more epoch) is a setting of the run, not of the training so far: the job
# resumes without --accept-config-change, at another world size too (the sampler re-shards the
# rest), and trains the third epoch.
expect_resume(${NP2} ${WORK}/b "--epochs;3"
  "resumed from [^\n]*${last_name}: step ${last_step}, epoch 2, [0-9]+ samples into it \\(saved by ${NP} rank"
  "resumed at ${NP2} rank(s)")
file(GLOB cb ${WORK}/b/ckpt-*.edp)
list(SORT cb)
list(GET cb -1 last_b)
if(last_b STREQUAL ${WORK}/b/${last_name})
  message(FATAL_ERROR "no checkpoint of the third epoch: ${cb}")
endif()
