# Fails when the dependency graph in docs/architecture.md is not what the build's own layer check
# finds (scripts/check_layers.py --graph): every line "layer -> uses" of the one must be the other's.
execute_process(COMMAND ${PYTHON} ${SCRIPT} --graph ${ROOT} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_layers.py --graph failed (${rc}):\n${out}")
endif()
string(REGEX MATCHALL "[a-z]+ +-> [^\n]*" want "${out}")
file(READ ${DOC} doc)
string(REGEX MATCHALL "\n[a-z]+ +-> [^\n]*" have "${doc}")
string(REPLACE "\n" "" have "${have}")
if(NOT want STREQUAL have)
  string(REPLACE ";" "\n" want_text "${want}")
  message(FATAL_ERROR "the dependency graph in docs/architecture.md differs from the build's check. Replace its "
    "block with what `scripts/check_layers.py --graph` prints:\n${want_text}")
endif()
message(STATUS "docs/architecture.md's dependency graph matches scripts/check_layers.py --graph")
