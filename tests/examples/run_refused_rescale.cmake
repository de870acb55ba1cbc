# A control file asking for 9 workers where the launcher can run 1-2 (EDP_ALLOWED_WORKERS, set by
# the test): the job must log the refusal once, keep 2 ranks, write no rescale record, exit 0 and
# reach a sane accuracy. Then a control file with a global batch larger than the training set.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/ck)
foreach(request "{\"workers\": 9}" "{\"workers\": 2, \"global_batch\": 4096}")
  file(REMOVE_RECURSE ${WORK}/ck)
  file(WRITE ${WORK}/control.json "${request}")
  set(ENV{EDP_RESCALE_FILE} ${WORK}/rescale.json)
  execute_process(
    COMMAND ${MPIEXEC} --oversubscribe -np 2 ${EXE} --limit 2000 --epochs 2 --no-eval --lr 0.05
            --checkpoint-dir ${WORK}/ck --control-file ${WORK}/control.json
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  message("request ${request}: exit ${rc}\n${err}\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the job did not finish (exit ${rc})")
  endif()
  string(REGEX MATCHALL "refusing the rescale request" refusals "${err}")
  list(LENGTH refusals n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected exactly one refusal message, got ${n}")
  endif()
  if(EXISTS ${WORK}/rescale.json)
    message(FATAL_ERROR "a refused request left a rescale record")
  endif()
  string(REGEX MATCH "\"world_size\": 2, .*\"global_batch\": 128, .*\"test_acc\": ([0-9.]+)" m "${out}")
  if(NOT m OR CMAKE_MATCH_1 LESS 0.6)
    message(FATAL_ERROR "expected 2 ranks at global batch 128 and test accuracy >= 0.6 (2 epochs of 2000 samples)")
  endif()
endforeach()
