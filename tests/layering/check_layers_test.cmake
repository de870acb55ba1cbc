# Builds a small tree that breaks the layer rule three ways and expects check_layers.py to fail
# naming each offending line.
file(REMOVE_RECURSE ${WORK})
file(WRITE ${WORK}/include/edp/train/timeline.h "#pragma once\n")
file(WRITE ${WORK}/include/edp/nn/layers.h "#pragma once\n#include \"edp/core/tensor.h\"\n#include \"edp/train/timeline.h\"\n")
file(WRITE ${WORK}/include/edp/core/tensor.h "#pragma once\n")
file(WRITE ${WORK}/src/cuda/runtime.cpp "#include \"../comm/device_buffers.h\"\n")
file(WRITE ${WORK}/src/comm/device_buffers.h "#pragma once\n")
file(WRITE ${WORK}/src/misc/helper.cpp "int x;\n")
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message("${out}")
if(rc EQUAL 0)
  message(FATAL_ERROR "check_layers.py accepted a tree with upward includes")
endif()
foreach(want
    "include/edp/nn/layers.h:3: #include \"edp/train/timeline.h\": layer nn may not use layer train"
    "src/cuda/runtime.cpp:1: #include \"../comm/device_buffers.h\" climbs out of its folder"
    "src/misc/helper.cpp: is in no layer's folder")
  string(FIND "${out}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "missing from the report: ${want}")
  endif()
endforeach()
string(FIND "${out}" "layers.h:2" ok_line)
if(NOT ok_line EQUAL -1)
  message(FATAL_ERROR "a downward include (nn -> core) was reported")
endif()
