// CUDA libraries opened on first use (src/cuda/lazy.h), testable without a GPU: cuBLASLt is not
// loaded at start, a symbol resolves to the library's own function (cublasLtGetVersion needs no
// device), and a missing library or symbol is an error naming it.
#include <gtest/gtest.h>

#include <cublasLt.h>

#include <fstream>
#include <sstream>
#include <string>

#include "cuda/cublas.h"
#include "edp/core/error.h"

namespace {
bool mapped(const std::string& lib) {
  std::ifstream f("/proc/self/maps");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str().find(lib) != std::string::npos;
}
}  // namespace

TEST(LazyLibraries, CublasLtIsOpenedOnFirstUse) {
  ASSERT_FALSE(mapped("libcublasLt.so")) << "cuBLASLt is loaded at start (linked, not opened on first use)";
  using Version = decltype(&cublasLtGetVersion);
  const auto version = reinterpret_cast<Version>(edp::cuda::lazy::symbol(EDP_CUBLAS_SONAME("cublasLt"), "cublasLtGetVersion"));
  EXPECT_GE(version(), static_cast<size_t>(CUBLAS_VER_MAJOR) * 10000);
  EXPECT_TRUE(mapped("libcublasLt.so"));
}

TEST(LazyLibraries, MissingLibraryOrSymbolIsNamed) {
  try {
    edp::cuda::lazy::symbol("libedp-no-such-library.so.1", "f");
    FAIL() << "no error";
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load libedp-no-such-library.so.1 (a GPU op needs it)"),
              std::string::npos)
        << e.what();
  }
  try {
    edp::cuda::lazy::symbol(EDP_CUBLAS_SONAME("cublasLt"), "cublasLtNoSuchFunction");
    FAIL() << "no error";
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no symbol cublasLtNoSuchFunction"), std::string::npos) << e.what();
  }
}
