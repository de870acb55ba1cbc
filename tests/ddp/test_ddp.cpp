// DDP correctness under mpirun:
//  - equivalence: N ranks × per-rank batch b for k SGD steps give the parameters of one process
//    training on the concatenated batch N·b. In float64 the only difference is the order of
//    the gradient sums (bucketed allreduce vs one GEMM), ~1e-15 relative per step, so we
//    require max |Δ| ≤ 1e-10; in float32 the same argument gives ~1e-6, we require ≤ 2e-5;
//  - after every step the replicas are bitwise identical across ranks;
//  - no_sync accumulation, uneven per-rank batches, buffer broadcast, mismatched models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "edp/comm/communicator.h"
#include "edp/core/random.h"
#include "edp/ddp/ddp.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"

using namespace edp;

namespace {

std::shared_ptr<nn::Sequential> small_cnn(DType dt) {
  manual_seed(5);
  auto m = nn::make<nn::Sequential>();
  m->add(nn::make<nn::Conv2d>(1, 4, 3, 1, 1), "conv");
  m->add(nn::make<nn::BatchNorm2d>(4), "bn");
  m->add(nn::make<nn::ReLU>(), "relu");
  m->add(nn::make<nn::MaxPool2d>(2), "pool");
  m->add(nn::make<nn::Flatten>(), "flat");
  m->add(nn::make<nn::Linear>(4 * 4 * 4, 16), "fc1");
  m->add(nn::make<nn::GELU>(), "gelu");
  m->add(nn::make<nn::Linear>(16, 5), "fc2");
  m->to(dt);
  return m;
}

// The global batch of step s: deterministic, the same on every rank.
void global_batch(int64_t s, int64_t n, DType dt, Tensor& x, Tensor& y) {
  Rng rng(derive_seed(77, static_cast<uint64_t>(s)));
  x = Tensor({n, 1, 8, 8}, DType::F64);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = rng.normal();
  x = x.to(dt);
  y = Tensor({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(5));
}

// Rows [begin, begin + len) of a batch (copies).
Tensor rows(const Tensor& t, int64_t begin, int64_t len) { return t.narrow(begin, len).clone(); }

double max_abs_diff(nn::Module& a, nn::Module& b) {
  double m = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t k = 0; k < pa.size(); ++k)
    for (int64_t i = 0; i < pa[k]->value.numel(); ++i)
      m = std::max(m, std::abs(pa[k]->value.item(i) - pb[k]->value.item(i)));
  return m;
}

// True if every parameter is bitwise identical on all ranks (min == max of each bit pattern).
bool replicas_identical(nn::Module& m, comm::Communicator& c) {
  bool same = true;
  for (nn::Parameter* p : m.parameters()) {
    const int64_t words = static_cast<int64_t>(p->value.nbytes() / 4);
    std::vector<int32_t> bits(static_cast<size_t>(words)), lo, hi;
    std::memcpy(bits.data(), p->value.raw(), p->value.nbytes());
    lo = bits;
    hi = bits;
    c.allreduce(lo.data(), lo.data(), words, DType::I32, comm::ReduceOp::Min);
    c.allreduce(hi.data(), hi.data(), words, DType::I32, comm::ReduceOp::Max);
    if (lo != hi) {
      ADD_FAILURE() << "parameter " << p->name << " differs across ranks";
      same = false;
    }
  }
  return same;
}

std::shared_ptr<nn::Sequential> mlp(DType dt) {
  manual_seed(9);
  auto m = nn::make<nn::Sequential>();
  m->add(nn::make<nn::Flatten>());
  m->add(nn::make<nn::Linear>(64, 32));
  m->add(nn::make<nn::ReLU>());
  m->add(nn::make<nn::Linear>(32, 32));
  m->add(nn::make<nn::GELU>());
  m->add(nn::make<nn::Linear>(32, 5));
  m->to(dt);
  return m;
}

// Trains the same model with DDP (rank r on rows [r·b, (r+1)·b) of each global batch) and, on
// every rank, a reference on the whole global batch; checks after every step that the replicas
// are bitwise identical and, when `compare_each_step`, that DDP matches the reference within tol.
void equivalence(const std::function<std::shared_ptr<nn::Sequential>()>& build, DType dt,
                 int64_t b, int64_t steps, ddp::DDPOptions dopt, optim::SGDOptions sopt,
                 bool compare_each_step, double tol) {
  auto& world = comm::world();
  const int W = world.size(), r = world.rank();
  auto dist_model = build();
  auto ref_model = build();
  ddp::DistributedDataParallel model(dist_model, world, dopt);
  ASSERT_GE(model.buckets().size(), 2u) << "the test wants several buckets";
  optim::SGD opt(dist_model->parameters(), sopt);
  optim::SGD ref_opt(ref_model->parameters(), sopt);
  nn::SoftmaxCrossEntropy ce, ref_ce;
  for (int64_t s = 0; s < steps; ++s) {
    Tensor x, y;
    global_batch(s, b * W, dt, x, y);
    opt.zero_grad();
    ce.forward(model.forward(rows(x, r * b, b)), rows(y, r * b, b));
    model.backward(ce.backward());
    opt.step();
    ref_opt.zero_grad();
    ref_ce.forward(ref_model->forward(x), y);
    ref_model->backward(ref_ce.backward());
    ref_opt.step();
    EXPECT_TRUE(replicas_identical(*dist_model, world)) << "step " << s;
    if (compare_each_step || (W == 1 && s + 1 == steps)) {
      EXPECT_LE(max_abs_diff(*dist_model, *ref_model), tol) << "step " << s << " on " << W << " ranks";
    }
  }
}

}  // namespace

// Without BatchNorm the per-rank split changes nothing mathematically: compare to 1 process at
// every step.
TEST(DDP, EquivalentToOneProcessFloat64) {
  equivalence([] { return mlp(DType::F64); }, DType::F64, 4, 5, {.bucket_cap_bytes = 4096, .first_bucket_bytes = 1024},
              {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}, true, 1e-10);
}
TEST(DDP, EquivalentToOneProcessFloat32) {
  equivalence([] { return mlp(DType::F32); }, DType::F32, 4, 5, {.bucket_cap_bytes = 4096, .first_bucket_bytes = 1024},
              {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}, true, 2e-5);
}
// BatchNorm normalises over each rank's batch, the reference over the global batch: the two
// agree only on one rank; on more, the replicas must still stay bitwise identical.
TEST(DDP, CnnWithBatchNormStaysIdenticalAcrossRanks) {
  equivalence([] { return small_cnn(DType::F64); }, DType::F64, 3, 4, {.bucket_cap_bytes = 2048, .first_bucket_bytes = 512},
              {.lr = 0.1, .momentum = 0.9}, false, 1e-10);
}

TEST(DDP, UnevenBatchesWeightedByShare) {
  // Rank r holds r+1 samples; weights (r+1)/total make the result the global-batch gradient.
  auto& world = comm::world();
  const int W = world.size(), r = world.rank();
  const int64_t total = static_cast<int64_t>(W) * (W + 1) / 2, begin = static_cast<int64_t>(r) * (r + 1) / 2;
  auto dist_model = mlp(DType::F64);
  auto ref_model = mlp(DType::F64);
  ddp::DistributedDataParallel model(dist_model, world);
  Tensor x, y;
  global_batch(0, total, DType::F64, x, y);
  nn::SoftmaxCrossEntropy ce, ref_ce;
  model.set_step_weight(static_cast<double>(r + 1) / static_cast<double>(total));
  ce.forward(model.forward(rows(x, begin, r + 1)), rows(y, begin, r + 1));
  model.backward(ce.backward());
  ref_ce.forward(ref_model->forward(x), y);
  ref_model->backward(ref_ce.backward());
  auto pd = dist_model->parameters(), pr = ref_model->parameters();
  for (size_t k = 0; k < pd.size(); ++k)
    for (int64_t i = 0; i < pd[k]->grad.numel(); ++i)
      ASSERT_NEAR(pd[k]->grad.item(i), pr[k]->grad.item(i), 1e-12) << pd[k]->name;
}

TEST(DDP, NoSyncAccumulatesThenAverages) {
  auto& world = comm::world();
  const int W = world.size(), r = world.rank();
  const int64_t b = 2;
  auto dist_model = mlp(DType::F64);
  auto ref_model = mlp(DType::F64);
  ddp::DistributedDataParallel model(dist_model, world);
  nn::SoftmaxCrossEntropy ce, ref_ce;
  Tensor x0, y0, x1, y1;
  global_batch(10, b * W, DType::F64, x0, y0);
  global_batch(11, b * W, DType::F64, x1, y1);
  {
    auto guard = model.no_sync();
    ce.forward(model.forward(rows(x0, r * b, b)), rows(y0, r * b, b));
    model.backward(ce.backward());
  }
  // Local only so far: rank 0's gradient must not yet include other ranks' data.
  ce.forward(model.forward(rows(x1, r * b, b)), rows(y1, r * b, b));
  model.backward(ce.backward());
  for (auto* xy : {&x0, &x1}) {
    const Tensor& yy = xy == &x0 ? y0 : y1;
    ref_ce.forward(ref_model->forward(*xy), yy);
    ref_model->backward(ref_ce.backward());
  }
  auto pd = dist_model->parameters(), pr = ref_model->parameters();
  for (size_t k = 0; k < pd.size(); ++k)
    for (int64_t i = 0; i < pd[k]->grad.numel(); ++i)
      ASSERT_NEAR(pd[k]->grad.item(i), pr[k]->grad.item(i), 1e-12) << pd[k]->name;
}

TEST(DDP, RankWithoutSamplesStillSynchronises) {
  auto& world = comm::world();
  const int W = world.size(), r = world.rank();
  auto dist_model = mlp(DType::F64);
  auto ref_model = mlp(DType::F64);
  ddp::DistributedDataParallel model(dist_model, world);
  Tensor x, y;
  global_batch(3, 2, DType::F64, x, y);
  nn::SoftmaxCrossEntropy ce, ref_ce;
  if (r == 0) {  // only rank 0 has data: weight 1, others weight 0 with zero grads
    model.set_step_weight(1.0);
    ce.forward(model.forward(x), y);
    model.backward(ce.backward());
  } else {
    model.set_step_weight(0.0);
    model.sync_without_backward();
  }
  ref_ce.forward(ref_model->forward(x), y);
  ref_model->backward(ref_ce.backward());
  auto pd = dist_model->parameters(), pr = ref_model->parameters();
  for (size_t k = 0; k < pd.size(); ++k)
    for (int64_t i = 0; i < pd[k]->grad.numel(); ++i)
      ASSERT_NEAR(pd[k]->grad.item(i), pr[k]->grad.item(i), 1e-12) << pd[k]->name << " W=" << W;
}

TEST(DDP, BroadcastsParametersAndBuffersFromRankZero) {
  auto& world = comm::world();
  manual_seed(100 + static_cast<uint64_t>(world.rank()));  // different init per rank
  auto m = nn::make<nn::Sequential>();
  m->add(nn::make<nn::Conv2d>(1, 2, 3));
  m->add(nn::make<nn::BatchNorm2d>(2));
  m->buffers()[0]->value.fill(static_cast<double>(world.rank()) + 0.5);
  ddp::DistributedDataParallel model(m, world);
  EXPECT_TRUE(replicas_identical(*m, world));
  EXPECT_EQ(m->buffers()[0]->value.item(0), 0.5f);
}

TEST(DDP, DifferentModelsFailOnEveryRankNamingTheParameter) {
  auto& world = comm::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto m = nn::make<nn::Sequential>();
  m->add(nn::make<nn::Linear>(4, 4), "fc1");
  m->add(nn::make<nn::Linear>(4, world.rank() == 1 ? 3 : 2), "fc2");
  try {
    ddp::DistributedDataParallel model(m, world);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("different models"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fc2.weight"), std::string::npos) << msg;
  }
}
