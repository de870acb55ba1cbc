# The library's layers (docs/architecture.md): one object library per layer, each compiled
# against an include view that holds only its own and lower layers' headers, so an upward
# #include fails the build with "No such file or directory". scripts/check_layers.py checks the
# same rule over the source text (relative paths included) and names the offending line.
#
# The views live in the build tree: layers/<layer>/pub/edp/<lower> -> include/edp/<lower> and
# layers/<layer>/priv/<lower> -> src/<lower> (private headers: #include "cuda/check.h"); the
# CUDA kernels' headers (kernels/) are visible from the cuda layer up.
set(EDP_LAYERS core cuda backend nn optim comm ddp data train elastic launch autoscale)

# edp_layer_view(layer out_var): creates the view of `layer` and returns its include dirs.
function(edp_layer_view layer out_var)
  set(root ${PROJECT_BINARY_DIR}/layers/${layer})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/pub/edp ${root}/priv)
  file(CREATE_LINK ${PROJECT_BINARY_DIR}/include/edp/config.h ${root}/pub/edp/config.h SYMBOLIC)
  set(allowed TRUE)
  foreach(l ${EDP_LAYERS})
    if(allowed)
      if(EXISTS ${PROJECT_SOURCE_DIR}/include/edp/${l})
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/edp/${l} ${root}/pub/edp/${l} SYMBOLIC)
      endif()
      if(EXISTS ${PROJECT_SOURCE_DIR}/src/${l})
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${l} ${root}/priv/${l} SYMBOLIC)
      endif()
      if(l STREQUAL "cuda")
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/kernels ${root}/priv/kernels SYMBOLIC)
      endif()
    endif()
    if(l STREQUAL layer)
      set(allowed FALSE)
    endif()
  endforeach()
  set(${out_var} ${root}/pub ${root}/priv PARENT_SCOPE)
endfunction()

# edp_add_layer(layer): the object library edp_layer_<layer> from src/<layer>/ (and, for the
# cuda layer, kernels/), compiled with the layer's view and the build flags.
function(edp_add_layer layer)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${layer}/*.cpp)
  if(EDP_HAVE_CUDA)
    file(GLOB_RECURSE cu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${layer}/*.cu)
    list(APPEND srcs ${cu})
    if(layer STREQUAL "cuda")
      file(GLOB kcu CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cu)
      list(APPEND srcs ${kcu})
    endif()
  endif()
  if(NOT EDP_HAVE_MPI)
    list(FILTER srcs EXCLUDE REGEX "/src/comm/mpi_")
  endif()
  set(t edp_layer_${layer})
  add_library(${t} OBJECT ${srcs})
  edp_layer_view(${layer} dirs)
  target_include_directories(${t} PRIVATE ${dirs})
  target_link_libraries(${t} PRIVATE edp_deps edp_build_flags)
  set_target_properties(${t} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(EDP_HAVE_CUDA)
    set_target_properties(${t} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF CUDA_STANDARD 17
                                          CUDA_STANDARD_REQUIRED ON)
  endif()
  target_sources(edp PRIVATE $<TARGET_OBJECTS:${t}>)
endfunction()
