// The CPU backend's one oneDNN engine, and the instruction-set policy that it starts with
// (EDP_CPU_ISA). Private to src/backend/cpu/.
#pragma once
#include "edp/config.h"
#if EDP_HAVE_DNNL
#include <dnnl.hpp>

namespace edp::ops::cpu {

// Created on first use, after the ISA policy has been applied (oneDNN fixes its ISA at the first
// kernel it generates).
dnnl::engine& dnnl_engine();
// The ISA oneDNN runs at: "avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx", ...
const char* dnnl_isa_name();

}  // namespace edp::ops::cpu
#endif
