# Run by CTest: install edp, then use only the install, as a user of it would:
#  1. build examples/consumer against it with find_package(edp): the README's first program
#     (examples/consumer/main.cpp) on edp::edp, and the CNN example's source on edp::models;
#  2. run the first program for one epoch (test accuracy >= 0.75: the 784-256-10 MLP reaches
#     ~0.84 after one epoch; 0.75 leaves room for the thread count's rounding, far above chance),
#     the out-of-tree CNN's --help, and an installed example's --help;
#  3. run the installed job spec share/edp/specs/mlp_small.json through the installed
#     edp-autoscale (submit, serve until idle, status): its command names an installed program
#     found on PATH, which holds only the install's bin/ before the system's.
# Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
set(P ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${P})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/consumer -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${P} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

run(${WORK_DIR}/build/first_program --epochs 1)
if(NOT out MATCHES "epoch 0: test accuracy 0\\.([0-9][0-9])")
  message(FATAL_ERROR "the first program printed no accuracy:\n${out}")
endif()
if(CMAKE_MATCH_1 LESS 75)
  message(FATAL_ERROR "the first program reached test accuracy 0.${CMAKE_MATCH_1} after one epoch, expected >= 0.75")
endif()
foreach(exe ${WORK_DIR}/build/cnn_example ${P}/bin/fashion_mnist_mlp ${P}/bin/elastic_mnist)
  run(${exe} --help)
  if(NOT out MATCHES "usage: ")
    message(FATAL_ERROR "${exe} --help printed no usage:\n${out}")
  endif()
endforeach()

set(ENV{PATH} "${P}/bin:$ENV{PATH}")
set(ROOT ${WORK_DIR}/serve)
run(${P}/bin/edp-autoscale submit --root ${ROOT} ${P}/share/edp/specs/mlp_small.json)
run(${P}/bin/edp-autoscale serve --root ${ROOT} --slots 2 --policy dp --exit-when-idle --quiet)
run(${P}/bin/edp-autoscale status --root ${ROOT} --json)
string(JSON state GET "${out}" jobs 0 state)
string(JSON code GET "${out}" jobs 0 exit_code)
if(NOT state STREQUAL "done" OR NOT code EQUAL 0)
  file(READ ${ROOT}/jobs/j0001/log log)
  message(FATAL_ERROR "the installed spec's job ended ${state} (exit ${code}):\n${log}")
endif()
