// Shared by the op tests of tests/backend/<name>_test.cpp: each checks the CUDA implementation of
// one op family (src/backend/cuda/<name>.cpp, kernels/<name>.cu) against the CPU backend, its
// oracle (src/backend/cpu/<name>.cpp), on fresh random inputs of several shapes, odd ones
// included (vector tails, single elements, non-multiples of the block size, views that are not
// 16-byte aligned). Device buffers are poisoned with NaN at allocation, so an unwritten output
// element fails. Ops are called through edp::ops, so the device dispatch is tested too.
//
// Tolerances (see tests/cuda/gpu_test_util.h):
//   exact           ReLU, dropout (same counter-based RNG), max-pool forward and non-overlapping
//                   backward, average-pool backward, argmax, counts
//   1e-5..1e-6 rel  other elementwise ops, BatchNorm, softmax cross-entropy, optimizers (FMA
//                   contraction and erfc-vs-erf differ from the CPU in the last bits)
//   16·√K·ε         float32 GEMM / convolution with EDP_TF32 off (K = reduction length)
//   5e-3            TF32 tensor-core GEMM / convolution (the default)
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "../cuda/gpu_test_util.h"
#include "edp/backend/cuda_ops.h"
#include "edp/backend/ops.h"

namespace edp::test {

// One NaN-poisoning environment per test program (an inline variable: registered once).
inline const auto* const g_poison_env = ::testing::AddGlobalTestEnvironment(new PoisonEnvironment);

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override { EDP_REQUIRE_GPU(); }
  void TearDown() override { cuda::set_tf32(true); }
};

inline Tensor G(const Tensor& t) { return t.to(gpu()); }

// Vector lengths for the elementwise ops: tails, single elements, non-multiples of the block.
inline const std::vector<int64_t> kSizes = {1, 3, 4, 5, 1023, 4096, 4097, 100003};

}  // namespace edp::test
