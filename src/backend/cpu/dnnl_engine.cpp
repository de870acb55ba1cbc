// The oneDNN engine of the CPU backend and its instruction-set policy.
//
// oneDNN generates its kernels at run time for the best ISA of the host. That is the default
// (EDP_CPU_ISA=host): AVX-512 where the host has it, and the bfloat16 products (AVX512-BF16,
// AMX) need it. Bits are then the same run to run on one host at a fixed thread count, and across
// hosts of the same CPU generation, but an AVX2 node and an AVX-512 node compute other bits (other
// register blockings, other summation orders). EDP_CPU_ISA=build caps oneDNN at the ISA this build
// was compiled for (EDP_CPU_FEATURES: x86-64-v3 -> AVX2, x86-64-v4 or an AVX-512 native build ->
// AVX-512), which gives a portable build the same bits on every host (docs/architecture.md,
// "Portable builds"). DNNL_MAX_CPU_ISA, oneDNN's own variable, overrides both.
#include "dnnl_engine.h"

#if EDP_HAVE_DNNL
#include <cstdlib>
#include <string>

#include "edp/core/knobs.h"
#include "edp/core/log.h"

namespace edp::ops::cpu {

namespace {
void apply_isa_policy() {
  if (std::getenv("DNNL_MAX_CPU_ISA")) return;
  if (knobs::get_string("EDP_CPU_ISA") != "build") return;
  const std::string f = std::string(",") + EDP_CPU_FEATURES + ",";
  auto has = [&](const char* x) { return f.find(std::string(",") + x + ",") != std::string::npos; };
  dnnl::cpu_isa isa = dnnl::cpu_isa::sse41;
  if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq"))
    isa = dnnl::cpu_isa::avx512_core;
  else if (has("avx2"))
    isa = dnnl::cpu_isa::avx2;
  else if (has("avx"))
    isa = dnnl::cpu_isa::avx;
  try {
    dnnl::set_max_cpu_isa(isa);
  } catch (const dnnl::error& e) {  // only possible once a kernel was generated: too late, say so
    log::warn("oneDNN: cannot cap the CPU ISA to the build's (", e.what(), "); bits may differ between hosts");
  }
}
}  // namespace

dnnl::engine& dnnl_engine() {
  static dnnl::engine e = [] {
    apply_isa_policy();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

const char* dnnl_isa_name() {
  dnnl_engine();
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::all: return "all";
    default: return "other";
  }
}

}  // namespace edp::ops::cpu
#endif
