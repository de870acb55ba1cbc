// Softmax cross-entropy on the GPU (src/backend/cuda/softmax_xent.cpp, kernels/softmax_xent.cu)
// against the CPU backend (src/backend/cpu/softmax_xent.cpp).
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "op_test_util.h"
#include "edp/backend/ops.h"
#include "edp/core/random.h"
#include "edp/core/threads.h"
#include "edp/nn/gpt.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "support/gradcheck_util.h"

namespace {
using namespace edp;
using namespace edp::test;

#if EDP_OP_TEST_CPU
// ---- gradients by finite differences (every build, test_backend_cpu; support/gradcheck_util.h) ----
using namespace edp::nn;
using Mismatch = GradCheckResult;

TEST(SoftmaxXentGrad, SoftmaxCrossEntropy) {
  Rng rng(15);
  Tensor z = random_input({5, 7}, rng);
  Tensor labels = Tensor::from_vector<int32_t>({5}, {0, 6, 3, 3, 1});
  SoftmaxCrossEntropy ce;
  ce.forward(z, labels);
  Tensor dz = ce.backward();
  auto loss = [&] {
    SoftmaxCrossEntropy c2;
    return c2.forward(z, labels);
  };
  Mismatch mm;
  compare("softmax_ce dlogits", z, dz, loss, mm);
  EXPECT_EQ(mm.mismatches, 0) << "max relative error " << mm.max_rel_err;
}

TEST(SoftmaxXentGrad, SequenceCrossEntropyIgnoreIndex) {
  Rng rng(50);
  Tensor z = random_input({2, 3, 5}, rng);
  Tensor t = Tensor::from_vector<int32_t>({2, 3}, {4, -1, 0, 2, 2, -1});
  SequenceCrossEntropy ce(-1);
  const double l = ce.forward(z, t);
  EXPECT_EQ(ce.counted(), 4);
  Tensor dz = ce.backward();
  ASSERT_EQ(dz.shape(), z.shape());
  for (int64_t c = 0; c < 5; ++c) {  // ignored positions: no gradient
    EXPECT_EQ(dz.item(1 * 5 + c), 0.0);
    EXPECT_EQ(dz.item(5 * 5 + c), 0.0);
  }
  // The mean over the 4 counted rows, from the definition.
  double want = 0;
  for (int64_t row : {0, 2, 3, 4}) {
    const int64_t lab = static_cast<int64_t>(t.item(row));
    double s = 0;
    for (int64_t c = 0; c < 5; ++c) s += std::exp(z.item(row * 5 + c));
    want += std::log(s) - z.item(row * 5 + lab);
  }
  EXPECT_NEAR(l, want / 4, 1e-12);
  auto loss = [&] {
    SequenceCrossEntropy c2(-1);
    return c2.forward(z, t);
  };
  Mismatch mm;
  compare("sequence_ce dlogits", z, dz, loss, mm);
  EXPECT_EQ(mm.mismatches, 0) << "max relative error " << mm.max_rel_err;
  EXPECT_THROW(ce.forward(z, Tensor::from_vector<int32_t>({2, 3}, {4, -2, 0, 2, 2, -1})), ShapeError);
}

#else  // the GPU against the CPU

// ---- softmax cross-entropy ---------------------------------------------------------------------------
TEST_F(CudaOps, SoftmaxCrossEntropyMatchesCpu) {
  uint64_t seed = 1000;
  for (auto [N, C] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 10}, {256, 10}, {33, 1000}, {300, 3}}) {
    SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C);
    const Tensor z = randn({N, C}, seed++, 4.0);
    const Tensor lab = labels(N, C, seed++);
    Tensor p_ref, p;
    const double l_ref = ops::softmax_cross_entropy_forward(z, lab, p_ref);
    const double l = ops::softmax_cross_entropy_forward(G(z), G(lab), p);
    EXPECT_NEAR(l, l_ref, 1e-6 * std::fabs(l_ref) + 1e-7);
    EXPECT_TRUE(close(p, p_ref, Tol{1e-6, 1e-7}, "probs"));
    Tensor p2;
    const Tensor dev_loss = cuda::softmax_cross_entropy_forward_async(G(z), G(lab), p2);
    EXPECT_NEAR(cuda::read_loss(dev_loss, G(lab)), l_ref, 1e-6 * std::fabs(l_ref) + 1e-7);
    const double scale = 1.0 / static_cast<double>(N);
    EXPECT_TRUE(close(ops::softmax_cross_entropy_backward(p, G(lab), scale),
                      ops::softmax_cross_entropy_backward(p_ref, lab, scale), Tol{1e-6, 1e-9}, "dz"));
    EXPECT_EQ(ops::count_correct(G(z), G(lab)), ops::count_correct(z, lab));
  }
}

TEST_F(CudaOps, InvalidLabelGivesTheCpuError) {
  const Tensor z = randn({4, 3}, 1);
  Tensor lab = labels(4, 3, 2);
  lab.data<int32_t>()[2] = 7;
  Tensor p;
  std::string cpu_msg, gpu_msg;
  try {
    ops::softmax_cross_entropy_forward(z, lab, p);
  } catch (const ShapeError& e) {
    cpu_msg = e.what();
  }
  try {
    ops::softmax_cross_entropy_forward(G(z), G(lab), p);
  } catch (const ShapeError& e) {
    gpu_msg = e.what();
  }
  EXPECT_FALSE(cpu_msg.empty());
  EXPECT_EQ(gpu_msg, cpu_msg);
}

// The sequence form (the GPT's loss): positions labelled -1 count neither in the loss nor in n.
TEST_F(CudaOps, SequenceCrossEntropyIgnoresTheIgnoreIndex) {
  const Tensor z = randn({6, 5}, 3300, 2.0);
  const Tensor lab = Tensor::from_vector<int32_t>({6}, {4, -1, 0, 2, -1, 1});
  Tensor p_ref, p;
  int64_t n_ref = 0, n = 0;
  const double l_ref = ops::softmax_cross_entropy_forward(z, lab, p_ref, -1, &n_ref);
  const double l = ops::softmax_cross_entropy_forward(G(z), G(lab), p, -1, &n);
  EXPECT_EQ(n, n_ref);
  EXPECT_EQ(n, 4);
  EXPECT_NEAR(l, l_ref, 1e-6 * std::fabs(l_ref));
  EXPECT_TRUE(close(ops::softmax_cross_entropy_backward(p, G(lab), 0.25, -1),
                    ops::softmax_cross_entropy_backward(p_ref, lab, 0.25, -1), Tol{1e-6, 1e-9}, "dz"));
}

#endif  // EDP_OP_TEST_CPU

}  // namespace
