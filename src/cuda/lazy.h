// CUDA libraries loaded on first use. A build with CUDA that runs on a machine without a GPU
// should cost no more than a CPU-only build; cuBLASLt alone adds ~60 MiB of resident memory to
// every process that links it (its relocations and initialisers), whether or not a GPU op ever
// runs. So edp does not link cuBLAS/cuBLASLt: their functions are called through
// `lazy::<name>(...)`, which opens the library (dlopen, by its soname, then in the toolkit's
// directory the build found) and resolves the symbol on its first call, with the declared
// signature (decltype of the header's declaration, so a mismatch cannot compile). A library that
// cannot be loaded is an edp::Error naming it and the reason.
#pragma once
#include <type_traits>
#include <utility>

namespace edp::cuda::lazy {

// The address of `symbol` in `library` (an soname such as "libcublasLt.so.13"), loading the
// library once; throws edp::Error naming both when either is missing.
void* symbol(const char* library, const char* symbol);

}  // namespace edp::cuda::lazy

// EDP_LAZY_FN(library, name): defines edp::cuda::lazy::name(args...) forwarding to the library's.
// EDP_LAZY_FN_TYPED(library, name, type): the same for a name the header overloads (a C++ inline
// wrapper beside the C function): `type` is the C function's type.
#define EDP_LAZY_FN_TYPED(library, name, type)                                                     \
  namespace edp::cuda::lazy {                                                                      \
  template <typename... A>                                                                         \
  inline auto name(A&&... a) {                                                                     \
    static const auto fn = reinterpret_cast<std::add_pointer_t<type>>(::edp::cuda::lazy::symbol(library, #name)); \
    return fn(std::forward<A>(a)...);                                                              \
  }                                                                                                \
  }
#define EDP_LAZY_FN(library, name) EDP_LAZY_FN_TYPED(library, name, std::remove_pointer_t<decltype(&::name)>)
