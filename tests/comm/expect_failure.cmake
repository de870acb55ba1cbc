# Runs a command and passes only if it exits non-zero AND its output matches EXPECT (a regex)
# and, when given, does not match REJECT. ctest's own WILL_FAIL + PASS_REGULAR_EXPRESSION cannot
# say both at once (a matching regex ignores the exit code).
# Usage: cmake -DCMD="a;b;c" -DEXPECT=regex -DSECONDS=60 [-DEXPECT_RC=N] [-DREJECT=regex] -P expect_failure.cmake
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${SECONDS})
message("exit: ${rc}\n--- stdout ---\n${out}\n--- stderr ---\n${err}")
if(rc STREQUAL "0")
  message(FATAL_ERROR "expected a non-zero exit")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the command did not exit by itself: ${rc}")
endif()
if(DEFINED EXPECT_RC AND NOT rc EQUAL EXPECT_RC)
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match '${EXPECT}'")
endif()
if(DEFINED REJECT AND "${out}${err}" MATCHES "${REJECT}")
  message(FATAL_ERROR "the output matches '${REJECT}', which it must not")
endif()
