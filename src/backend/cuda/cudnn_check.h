// CUDNN_CHECK(call): a cuDNN status other than success becomes an edp::Error naming the call, its
// file and line and cuDNN's message. For the files that call cuDNN (conv2d.cpp, attention_cudnn.cpp),
// in builds that have it (EDP_HAVE_CUDNN).
#pragma once
#include <cudnn.h>

#include <string>

#include "edp/core/error.h"

#define CUDNN_CHECK(call)                                                                     \
  do {                                                                                        \
    const cudnnStatus_t edp_cudnn_st_ = (call);                                               \
    if (edp_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                                \
      throw ::edp::Error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +             \
                         ": cuDNN call `" #call "` failed: " +                                \
                         cudnnGetErrorString(edp_cudnn_st_));                                 \
  } while (0)
