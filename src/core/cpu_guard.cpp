// The start-up check that this CPU has the instruction set edp's host code was compiled for
// (EDP_CPU_FEATURES in config.h: x86-64-v3 by default, see cmake/EdpCpuArch.cmake). Without it a
// binary built for AVX2 or AVX-512 dies on an older node with a bare "Illegal instruction" the
// first time the compiler happened to use a new instruction; with it, the program stops before
// main() and says which feature is missing and how to rebuild.
//
// The check runs as a high-priority constructor, before the other static initialisers of the
// program, and is compiled for the x86-64 baseline (target attribute) so that it cannot itself
// use an instruction it is about to test for. tensor.cpp and edprun.cpp reference
// edp_cpu_guard_anchor so that every program linking edp pulls this file in.
#include <unistd.h>

#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "edp/config.h"

extern "C" {
int edp_cpu_guard_anchor = 0;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
namespace {

__attribute__((target("arch=x86-64"))) void say(const char* s) {
  ssize_t r = ::write(2, s, std::strlen(s));
  (void)r;
}

__attribute__((target("arch=x86-64"))) bool has(const char* f) {
  // __builtin_cpu_supports needs a string literal, hence the table.
  if (!std::strcmp(f, "sse4.2")) return __builtin_cpu_supports("sse4.2");
  if (!std::strcmp(f, "avx")) return __builtin_cpu_supports("avx");
  if (!std::strcmp(f, "avx2")) return __builtin_cpu_supports("avx2");
  if (!std::strcmp(f, "fma")) return __builtin_cpu_supports("fma");
  if (!std::strcmp(f, "bmi2")) return __builtin_cpu_supports("bmi2");
  if (!std::strcmp(f, "f16c")) {  // CPUID.1:ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c")
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  }
  if (!std::strcmp(f, "avx512f")) return __builtin_cpu_supports("avx512f");
  if (!std::strcmp(f, "avx512bw")) return __builtin_cpu_supports("avx512bw");
  if (!std::strcmp(f, "avx512cd")) return __builtin_cpu_supports("avx512cd");
  if (!std::strcmp(f, "avx512dq")) return __builtin_cpu_supports("avx512dq");
  if (!std::strcmp(f, "avx512vl")) return __builtin_cpu_supports("avx512vl");
  if (!std::strcmp(f, "avx512vnni")) return __builtin_cpu_supports("avx512vnni");
  if (!std::strcmp(f, "avx512bf16")) return __builtin_cpu_supports("avx512bf16");
  return true;  // a feature this table does not know is not checked
}

__attribute__((target("arch=x86-64"), constructor(101))) void edp_cpu_guard() {
  __builtin_cpu_init();
  char list[] = EDP_CPU_FEATURES;  // "avx,avx2,fma,..."
  char* save = nullptr;
  for (char* f = strtok_r(list, ",", &save); f; f = strtok_r(nullptr, ",", &save)) {
    if (has(f)) continue;
    say("edp: this CPU lacks ");
    say(f);
    say(", which this build of edp requires (host code built for " EDP_CPU_ARCH
        " with " EDP_COMPILER "). Rebuild edp for this cluster's oldest CPU, e.g. "
        "cmake -DEDP_CPU_ARCH=x86-64-v2 -DEDP_NATIVE=OFF.\n");
    _exit(1);
  }
}

}  // namespace
#endif
