# The CPU instruction set edp's host code is compiled for, and the floating-point rules that
# keep its bitwise contracts. Sets EDP_ARCH_FLAGS (a list of compile options for C++ code),
# EDP_ARCH_SUMMARY (one line for the configure summary, checkpoints and bench JSON) and
# EDP_ARCH_FEATURES (the ISA macros the flags enable, checked at program start).
#
# Why not -march=native by default: a library built on one node must run on every node of the
# cluster (an AVX-512 build dies with SIGILL on an AVX2 node), ccache must not hand out objects
# for another CPU, and Eigen's kernels take other code paths (FMA, vector width) per ISA, so two
# ISAs give two sets of bits for the same run. x86-64-v3 (AVX2, FMA, BMI2; Intel Haswell 2013+,
# AMD Zen 2017+) runs on every x86-64 GPU server and training host in service today, and every
# host runs the same instructions, so the same run gives the same bits on all of them.
# EDP_NATIVE=ON tunes for the build machine (benchmarks); EDP_CPU_ARCH picks another level.
set(EDP_CPU_ARCH "x86-64-v3" CACHE STRING
    "x86-64 ISA level for host code (-march=...): x86-64, x86-64-v2, x86-64-v3 (default), x86-64-v4; empty = compiler default")
option(EDP_NATIVE "Tune host code for the build machine's CPU (-march=native); binaries may not run elsewhere" OFF)

set(EDP_ARCH_FLAGS "")
set(_edp_march "")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  if(EDP_NATIVE)
    set(_edp_march native)
  elseif(NOT EDP_CPU_ARCH STREQUAL "")
    set(_edp_march ${EDP_CPU_ARCH})
  endif()
endif()
if(_edp_march)
  list(APPEND EDP_ARCH_FLAGS -march=${_edp_march})
endif()
# No contraction of a*b+c into FMA behind the code's back: where it happens depends on the
# optimiser, so it would make bits depend on the build. (Eigen's explicit FMA kernels are
# unaffected: they are the same code on every host of one ISA level.)
list(APPEND EDP_ARCH_FLAGS -ffp-contract=off)

# The ISA macros the flags turn on, for the start-up check (src/core/cpu_guard.cpp).
set(EDP_ARCH_FEATURES "")
execute_process(
  COMMAND ${CMAKE_CXX_COMPILER} ${EDP_ARCH_FLAGS} -dM -E -x c++ /dev/null
  OUTPUT_VARIABLE _edp_macros ERROR_QUIET RESULT_VARIABLE _edp_rc)
if(_edp_rc EQUAL 0)
  foreach(f SSE4_2 AVX AVX2 FMA BMI2 F16C AVX512F AVX512BW AVX512CD AVX512DQ AVX512VL AVX512VNNI AVX512BF16)
    if(_edp_macros MATCHES "#define __${f}__ 1")
      string(TOLOWER ${f} _lf)
      if(_lf STREQUAL "sse4_2")
        set(_lf "sse4.2")
      endif()
      list(APPEND EDP_ARCH_FEATURES ${_lf})
    endif()
  endforeach()
endif()

# Probe the compiler with these flags for the constant-vector miscompile (GCC 12 with AVX-512,
# cmake/probes/const_vector.cpp). If the flags trigger it, turn off the SLP vectorizer, the pass
# that produces the bad constant, and probe again; if that does not help either, stop.
set(EDP_ARCH_WORKAROUND "")
if(NOT CMAKE_CROSSCOMPILING)
  foreach(_attempt 1 2)
    try_run(_edp_run _edp_compiled ${CMAKE_BINARY_DIR}/probes/const_vector
      ${PROJECT_SOURCE_DIR}/cmake/probes/const_vector.cpp
      COMPILE_DEFINITIONS -O2 ${EDP_ARCH_FLAGS}
      RUN_OUTPUT_VARIABLE _edp_probe_out)
    if(NOT _edp_compiled OR _edp_run EQUAL 0)
      break()
    endif()
    if(_attempt EQUAL 2)
      message(FATAL_ERROR "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} with "
        "'${EDP_ARCH_FLAGS}' miscompiles constant vectors even with -fno-tree-slp-vectorize "
        "(probe printed: ${_edp_probe_out}). Use another EDP_CPU_ARCH or another compiler.")
    endif()
    message(STATUS "edp: ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION} miscompiles "
      "constant vectors with '${EDP_ARCH_FLAGS}' (the probe stored {1,1,0,0} and read back {${_edp_probe_out}}); "
      "adding -fno-tree-slp-vectorize")
    list(APPEND EDP_ARCH_FLAGS -fno-tree-slp-vectorize)
    set(EDP_ARCH_WORKAROUND "-fno-tree-slp-vectorize (GCC constant-vector miscompile)")
  endforeach()
endif()

if(_edp_march)
  set(EDP_ARCH_SUMMARY "${_edp_march}")
else()
  set(EDP_ARCH_SUMMARY "compiler default")
endif()
string(JOIN "," _edp_feat_csv ${EDP_ARCH_FEATURES})
set(EDP_ARCH_SUMMARY "${EDP_ARCH_SUMMARY} [${_edp_feat_csv}]")
