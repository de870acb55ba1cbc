// SGD and AdamW on the GPU (src/backend/cuda/optim.cpp, kernels/optim.cu) against the CPU backend
// (src/backend/cpu/optim.cpp), through edp::optim; gradient scaling and the multi-tensor norm.
// Shapes, tolerances and the oracle: op_test_util.h.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "edp/nn/module.h"
#include "edp/optim/optimizer.h"
#include "op_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

// ---- optimizers (through edp::optim, i.e. ops::sgd_step / ops::adamw_step and the fused multi-tensor kernels)
struct ParamSet {
  std::vector<std::unique_ptr<nn::Parameter>> own;
  std::vector<nn::Parameter*> ptrs;
};

// 30 tensors (more than one launch holds) of odd sizes, one spanning several chunks.
ParamSet make_params(Device d, uint64_t seed) {
  ParamSet s;
  std::vector<int64_t> sizes = {3 * 65536 + 7, 1, 5, 1000, 65536, 65537};
  for (int i = 0; i < 24; ++i) sizes.push_back(17 * i + 3);
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto p = std::make_unique<nn::Parameter>();
    p->name = "p";
    p->name += std::to_string(i);
    p->value = randn({sizes[i]}, seed + i).to(d);
    p->grad = Tensor::zeros({sizes[i]}, DType::F32, d);
    s.ptrs.push_back(p.get());
    s.own.push_back(std::move(p));
  }
  return s;
}

void set_grads(ParamSet& s, uint64_t seed) {
  for (size_t i = 0; i < s.ptrs.size(); ++i)
    s.ptrs[i]->grad.copy_from(randn(s.ptrs[i]->grad.shape(), seed + 1000 * i).to(s.ptrs[i]->grad.device()));
}

template <typename Opt, typename Options>
void compare_optimizer(const Options& o, Tol tol, const char* what) {
  ParamSet cpu = make_params(Device::cpu(), 11), dev = make_params(gpu(), 11);
  Opt oc(cpu.ptrs, o), og(dev.ptrs, o);
  for (int step = 0; step < 5; ++step) {
    set_grads(cpu, 77 + step);
    set_grads(dev, 77 + step);
    oc.step();
    og.step();
  }
  for (size_t i = 0; i < cpu.ptrs.size(); ++i)
    EXPECT_TRUE(close(dev.ptrs[i]->value, cpu.ptrs[i]->value, tol, std::string(what) + " " + cpu.ptrs[i]->name));
  const auto sc = oc.state(), sg = og.state();
  ASSERT_EQ(sc.size(), sg.size());
  for (size_t i = 0; i < sc.size(); ++i) EXPECT_TRUE(close(*sg[i], *sc[i], tol, std::string(what) + " state"));
}

// The GPU kernel's compiler contracts a·b + c into one fused multiply-add where the CPU loop may
// round twice, so each step may differ by about one unit in the last place of its largest operand
// (|p| + lr·|g| < 8 for these standard-normal values: 2^-21 to 2^-20); over 5 steps atol 2e-6.
// Measured on an H100: at most 4.8e-7. A wrong rule (weight decay, Nesterov, dampening) moves
// values by 1e-4 or more.
TEST_F(CudaOps, SgdMatchesCpu) {
  const Tol tol{1e-6, 2e-6};
  compare_optimizer<optim::SGD>(optim::SGDOptions{0.1, 0.0, 0.0, 0.0, false}, tol, "plain");
  compare_optimizer<optim::SGD>(optim::SGDOptions{0.05, 0.9, 0.0, 5e-4, true}, tol, "nesterov");
  compare_optimizer<optim::SGD>(optim::SGDOptions{0.05, 0.9, 0.1, 1e-2, false}, tol, "dampened");
}

TEST_F(CudaOps, AdamWMatchesCpu) {
  compare_optimizer<optim::AdamW>(optim::AdamWOptions{1e-3, 0.9, 0.999, 1e-8, 1e-2}, Tol{1e-5, 1e-7}, "adamw");
}

TEST_F(CudaOps, GradientScalingAndNorm) {
  ParamSet dev = make_params(gpu(), 5);
  set_grads(dev, 9);
  std::vector<Tensor*> g;
  std::vector<const Tensor*> cg;
  double ss = 0;
  std::vector<Tensor> before;
  for (auto* p : dev.ptrs) {
    g.push_back(&p->grad);
    cg.push_back(&p->grad);
    before.push_back(p->grad.to(Device::cpu()));
    ss += ops::sum_squares(before.back());
  }
  EXPECT_NEAR(cuda::sum_squares_multi(cg), ss, 1e-10 * ss);
  EXPECT_FALSE(cuda::scale_and_check_finite(g, 0.5f));
  for (size_t i = 0; i < g.size(); ++i) {
    Tensor half = before[i].clone();
    ops::scale_(half, 0.5);
    EXPECT_TRUE(same(*g[i], half, "scaled by 1/2 (exact)"));
  }
  // An overflow anywhere is reported.
  Tensor big = Tensor::full({3}, 3e38, DType::F32, gpu());
  std::vector<Tensor*> with_big = g;
  with_big.push_back(&big);
  EXPECT_TRUE(cuda::scale_and_check_finite(with_big, 2.0f));
  // clip_grad_norm takes the fused path for device parameters.
  set_grads(dev, 9);
  const double norm = optim::clip_grad_norm(dev.ptrs, 1.0);
  EXPECT_NEAR(norm, std::sqrt(ss), 1e-6 * std::sqrt(ss));
  double after = 0;
  for (auto* p : dev.ptrs) after += ops::sum_squares(p->grad);
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-4);
}

}  // namespace
