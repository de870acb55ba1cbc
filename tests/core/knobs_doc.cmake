# Fails when docs/knobs.md is not what the knob registry prints (edp-knobs --markdown).
execute_process(COMMAND ${EXE} --markdown OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "edp-knobs --markdown failed (${rc})")
endif()
file(READ ${OUT} want)
file(READ ${DOC} have)
if(NOT want STREQUAL have)
  message(FATAL_ERROR "docs/knobs.md differs from the knob registry (src/core/knobs.cpp). "
    "Regenerate it: <build>/tools/edp-knobs/edp-knobs --markdown > docs/knobs.md\n"
    "(the registry's version is in ${OUT}; diff it with docs/knobs.md)")
endif()
message(STATUS "docs/knobs.md matches the knob registry")
