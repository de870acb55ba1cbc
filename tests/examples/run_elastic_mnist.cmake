# The README's elastic program: trains 2 epochs on 2 ranks (test accuracy >= 0.8 after them: the
# MLP reaches ~0.85), writing checkpoints; run again on 1 rank it resumes after the last epoch and
# exits 0 without training. Variables: CMD, CMD2, WORK.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 250)
if(NOT rc EQUAL 0 OR NOT out MATCHES "epoch 2: 2 worker\\(s\\), train loss [0-9.]+, test accuracy 0\\.([0-9]+)")
  message(FATAL_ERROR "exit ${rc}\n${out}\n${err}")
endif()
if(CMAKE_MATCH_1 LESS 8000)
  message(FATAL_ERROR "test accuracy 0.${CMAKE_MATCH_1} after 2 epochs, expected >= 0.8\n${out}")
endif()
execute_process(COMMAND ${CMD2} RESULT_VARIABLE rc OUTPUT_VARIABLE out2 ERROR_VARIABLE err2 TIMEOUT 250)
if(NOT rc EQUAL 0 OR NOT err2 MATCHES "resumed from [^\n]*: step 938, epoch 2, 60000 samples into it" OR out2 MATCHES "epoch")
  message(FATAL_ERROR "the resumed run: exit ${rc}\n${out2}\n${err2}")
endif()
message(STATUS "${out}")
