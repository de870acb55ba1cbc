# Every example answers --help with its usage (exit 0, on stdout) and refuses an unknown option
# (exit 2, naming it), without training and without writing a file (elastic_mnist once took
# "--help" for its checkpoint folder). Variables: EXES (the programs, ;-separated), WORK.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
foreach(exe ${EXES})
  get_filename_component(name ${exe} NAME)
  execute_process(COMMAND ${exe} --help WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "usage|Usage|--help" OR out MATCHES "epoch [0-9]")
    message(FATAL_ERROR "${name} --help: exit ${rc}, expected 0 and the usage on stdout\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  execute_process(COMMAND ${exe} --no-such-option WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "unknown option --no-such-option")
    message(FATAL_ERROR "${name} --no-such-option: exit ${rc}, expected 2 and 'unknown option --no-such-option'\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  file(GLOB left ${WORK}/* ${WORK}/.*)
  if(left)
    message(FATAL_ERROR "${name} --help / --no-such-option wrote ${left}")
  endif()
  message(STATUS "${name}: --help and --no-such-option as expected")
endforeach()
