// DDP correctness under mpirun:
//  - equivalence: N ranks × per-rank batch b for k SGD steps give the parameters of one process
//    training on the concatenated batch N·b. In float64 the only difference is the order of
//    the gradient sums (bucketed allreduce vs one GEMM), ~1e-15 relative per step, so we
//    require max |Δ| ≤ 1e-10; in float32 the same argument gives ~1e-6, we require ≤ 2e-5;
//  - after every step the replicas are bitwise identical across ranks;
//  - no_sync accumulation, uneven per-rank batches, buffer broadcast, mismatched models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>

#include "edp/comm/communicator.h"
#include "edp/core/allocator.h"
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

// ---- ZeRO stage 1: the optimizer state sharded over the ranks -------------------------------------
namespace {

bool bitwise_equal(nn::Module& a, nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t k = 0; k < pa.size(); ++k)
    if (std::memcmp(pa[k]->value.raw(), pb[k]->value.raw(), pa[k]->value.nbytes()) != 0) {
      ADD_FAILURE() << "parameter " << pa[k]->name << " differs";
      return false;
    }
  return true;
}

// One step of `model` on this rank's rows of global batch s.
void train_step(ddp::DistributedDataParallel& model, optim::Optimizer& opt, nn::SoftmaxCrossEntropy& ce, int64_t s,
                int64_t b, DType dt, double clip = 0) {
  auto& world = comm::world();
  Tensor x, y;
  global_batch(s, b * world.size(), dt, x, y);
  opt.zero_grad();
  ce.forward(model.forward(rows(x, world.rank() * b, b)), rows(y, world.rank() * b, b));
  model.backward(ce.backward());
  if (clip > 0) model.clip_grad_norm(clip);
  model.step(opt);
}

// The same model twice, trained unsharded and sharded. Small buckets: several of them, and rank
// parts that start and end inside parameters.
struct Twins {
  std::shared_ptr<nn::Sequential> plain_model, zero_model;
  std::unique_ptr<ddp::DistributedDataParallel> plain, zero;
  explicit Twins(DType dt, int stage = 1) : plain_model(mlp(dt)), zero_model(mlp(dt)) {
    plain = std::make_unique<ddp::DistributedDataParallel>(
        plain_model, comm::world(), ddp::DDPOptions{.bucket_cap_bytes = 3000, .first_bucket_bytes = 700});
    zero = std::make_unique<ddp::DistributedDataParallel>(
        zero_model, comm::world(), ddp::DDPOptions{.bucket_cap_bytes = 3000, .first_bucket_bytes = 700, .zero_stage = stage});
  }
};

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<nn::Parameter*>)>;

// The sharded run against the unsharded one, step by step, on the same data. Every element's
// update is the unsharded one (the optimizers are elementwise) and on one host edp's shared memory
// reduces every element in rank order, in the reduce-scatter as in the allreduce: the parameters
// must be bitwise equal, not merely close.
// zero_stage 2 (the gradients sharded too) makes the same copies and reductions: bitwise too, and
// no parameter keeps a gradient after a step.
void sharded_equals_unsharded(DType dt, const MakeOpt& make_opt, int64_t steps, int stage = 1) {
  auto& world = comm::world();
  Twins t(dt, stage);
  auto &plain_model = t.plain_model, &zero_model = t.zero_model;
  auto &plain = *t.plain, &zero = *t.zero;
  ASSERT_EQ(zero.sharded(), world.size() > 1);
  ASSERT_GE(zero.buckets().size(), 3u);
  auto plain_opt = make_opt(plain_model->parameters()), zero_opt = make_opt(zero_model->parameters());
  nn::SoftmaxCrossEntropy ce1, ce2;
  for (int64_t s = 0; s < steps; ++s) {
    plain_opt->set_lr(0.02 / (1.0 + 0.01 * static_cast<double>(s)));  // a schedule: read at every step
    zero_opt->set_lr(plain_opt->lr());
    train_step(plain, *plain_opt, ce1, s, 3, dt);
    train_step(zero, *zero_opt, ce2, s, 3, dt);
    ASSERT_TRUE(bitwise_equal(*zero_model, *plain_model)) << "step " << s << " on " << world.size() << " ranks";
    if (stage == 2 && world.size() > 1)
      for (const nn::Parameter* p : zero_model->parameters())
        ASSERT_FALSE(p->grad.defined()) << p->name << " keeps its whole gradient after step " << s;
  }
  EXPECT_TRUE(replicas_identical(*zero_model, world));
  EXPECT_EQ(zero_opt->steps(), plain_opt->steps());
}

MakeOpt adamw() {
  return [](std::vector<nn::Parameter*> p) {
    return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.05});
  };
}
MakeOpt sgd() {
  return [](std::vector<nn::Parameter*> p) {
    return std::make_unique<optim::SGD>(std::move(p),
                                        optim::SGDOptions{.lr = 0.02, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
  };
}

}  // namespace

TEST(DDPZero, ShardedAdamWIsBitwiseTheUnshardedRunFloat32) { sharded_equals_unsharded(DType::F32, adamw(), 200); }
TEST(DDPZero, ShardedAdamWIsBitwiseTheUnshardedRunFloat64) { sharded_equals_unsharded(DType::F64, adamw(), 20); }
TEST(DDPZero, ShardedSgdIsBitwiseTheUnshardedRun) { sharded_equals_unsharded(DType::F32, sgd(), 40); }
TEST(DDPZero, Stage2AdamWIsBitwiseTheUnshardedRunFloat32) { sharded_equals_unsharded(DType::F32, adamw(), 200, 2); }
TEST(DDPZero, Stage2SgdIsBitwiseTheUnshardedRun) { sharded_equals_unsharded(DType::F32, sgd(), 40, 2); }
TEST(DDPZero, Stage2AdamWIsBitwiseTheUnshardedRunFloat64) { sharded_equals_unsharded(DType::F64, adamw(), 20, 2); }

// What a rank holds between steps: at zero_stage 1 every parameter's gradient and the buckets'
// whole buffers (its reduced part is a view into them); at 2 only the reduced parts. Counted by the
// host allocator (every CPU tensor's bytes, process-wide: both models are built, trained and
// measured alike, so what else lives in the process cancels).
TEST(DDPZero, Stage2KeepsNoWholeGradientBetweenSteps) {
  auto& world = comm::world();
  if (world.size() < 2) GTEST_SKIP() << "sharding needs 2 ranks or more";
  const DType dt = DType::F32;
  int64_t held[3] = {0, 0, 0}, grad_bytes = 0;
  for (int stage : {1, 2}) {
    const int64_t before = host_allocator_stats().allocated_bytes;
    auto model = mlp(dt);
    grad_bytes = 0;
    for (const nn::Parameter* p : model->parameters()) grad_bytes += static_cast<int64_t>(p->value.nbytes());
    {
      ddp::DistributedDataParallel zero(model, world, {.bucket_cap_bytes = 3000, .first_bucket_bytes = 700, .zero_stage = stage});
      auto opt = adamw()(model->parameters());
      nn::SoftmaxCrossEntropy ce;
      for (int64_t s = 0; s < 3; ++s) train_step(zero, *opt, ce, s, 3, dt);
      EXPECT_EQ(zero.sharding_stage(), stage);
      held[stage] = host_allocator_stats().allocated_bytes - before;
      const nn::Parameter* none = zero.first_nonfinite_grad();
      EXPECT_EQ(none, nullptr) << "stage " << stage << ": " << none->name;
    }
  }
  // Stage 1 holds the gradients and the buffers (N blocks of part + 1 per bucket) beyond stage 2's
  // parts (1/N of a buffer): the gradients' bytes more, and (N - 1)/N of them again for the buffers
  // (less the allocator's rounding to 64 bytes); asserted: more than the gradients alone.
  std::printf("[rank %d] held between steps: stage 1 %lld bytes, stage 2 %lld; the gradients %lld\n", world.rank(),
              static_cast<long long>(held[1]), static_cast<long long>(held[2]), static_cast<long long>(grad_bytes));
  EXPECT_GT(held[1] - held[2], grad_bytes)
      << "stage 1 holds " << held[1] << " bytes, stage 2 " << held[2] << "; the gradients are " << grad_bytes;
}

// A NaN in one rank's input reaches every averaged gradient: each rank finds it in its own parts
// (stage 1 and 2) or in the whole gradients (unsharded); a finite step finds nothing.
TEST(DDPZero, ANonFiniteGradientIsFoundInTheParts) {
  auto& world = comm::world();
  const DType dt = DType::F32;
  for (int stage : {0, 1, 2}) {
    auto model = mlp(dt);
    ddp::DistributedDataParallel d(model, world, {.bucket_cap_bytes = 3000, .first_bucket_bytes = 700, .zero_stage = stage});
    nn::SoftmaxCrossEntropy ce;
    for (int bad : {0, 1}) {
      Tensor x, y;
      global_batch(bad, 3 * world.size(), dt, x, y);
      Tensor mine = rows(x, world.rank() * 3, 3).clone();
      if (bad && world.rank() == world.size() - 1) mine.data<float>()[1] = std::nanf("");
      ce.forward(d.forward(mine), rows(y, world.rank() * 3, 3));
      d.backward(ce.backward());
      const nn::Parameter* found = d.first_nonfinite_grad();
      EXPECT_EQ(found != nullptr, bad == 1) << "stage " << stage << ", rank " << world.rank()
                                            << (found ? ": " + found->name : std::string());
      d.skip_step();
      model->zero_grad();
    }
  }
}

// Each rank holds its part of the state; gathered, the state is the unsharded optimizer's; scattered
// into a new sharded job (a resume from a checkpoint), training goes on as the unsharded run does.
TEST(DDPZero, StateIsShardedAndGathersAndScattersExactly) {
  auto& world = comm::world();
  const DType dt = DType::F32;
  Twins t(dt);
  auto &plain_model = t.plain_model, &zero_model = t.zero_model;
  auto &plain = *t.plain, &zero = *t.zero;
  auto plain_opt = adamw()(plain_model->parameters()), zero_opt = adamw()(zero_model->parameters());
  nn::SoftmaxCrossEntropy ce1, ce2, ce3;
  for (int64_t s = 0; s < 5; ++s) {
    train_step(plain, *plain_opt, ce1, s, 3, dt);
    train_step(zero, *zero_opt, ce2, s, 3, dt);
  }
  const int64_t full = plain.optimizer_state_bytes(*plain_opt), mine = zero.optimizer_state_bytes(*zero_opt);
  const int64_t total = world.allreduce_value<int64_t>(mine, comm::ReduceOp::Sum);
  EXPECT_EQ(total, full) << "the parts of all ranks make the whole state, each element once";
  if (world.size() > 1) {  // a part is at most one element past 1/N of a bucket: 2 moments x 4 bytes
    EXPECT_LE(mine, full / world.size() + 2 * 4 * static_cast<int64_t>(zero.buckets().size()))
        << "a rank holds about 1/" << world.size() << " of the state";
  }

  zero.gather_optimizer_state(*zero_opt);  // as a checkpoint would, on every rank
  const std::vector<Tensor*> a = plain_opt->state(), g = zero_opt->state();
  ASSERT_EQ(a.size(), g.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(a[i]->raw(), g[i]->raw(), a[i]->nbytes()), 0) << "state tensor " << i;
  EXPECT_EQ(zero_opt->steps(), plain_opt->steps());

  // A new sharded job from that state (the resumed model and optimizer), trained on.
  auto resumed_model = mlp(dt);
  for (size_t k = 0; k < resumed_model->parameters().size(); ++k)
    resumed_model->parameters()[k]->value.copy_from(zero_model->parameters()[k]->value);
  ddp::DistributedDataParallel resumed(resumed_model, world,
                                       {.bucket_cap_bytes = 3000, .first_bucket_bytes = 700, .zero_stage = 1});
  auto resumed_opt = adamw()(resumed_model->parameters());
  const std::vector<Tensor*> r = resumed_opt->state();
  for (size_t i = 0; i < r.size(); ++i) r[i]->copy_from(*g[i]);
  resumed_opt->set_steps(zero_opt->steps());
  resumed.scatter_optimizer_state(*resumed_opt);
  for (int64_t s = 5; s < 12; ++s) {
    train_step(plain, *plain_opt, ce1, s, 3, dt);
    train_step(resumed, *resumed_opt, ce3, s, 3, dt);
    ASSERT_TRUE(bitwise_equal(*resumed_model, *plain_model)) << "step " << s;
  }
}

// Clipping sums the squares of every rank's parts: the same norm as unsharded up to the order of
// the sum (float64 accumulation of float32 squares: ~1e-12 relative), hence the same clipped step
// up to one rounding of the scale factor.
TEST(DDPZero, ClipGradNormOverTheShards) {
  auto& world = comm::world();
  const DType dt = DType::F64;
  for (int stage : {1, 2}) {
  SCOPED_TRACE(testing::Message() << "zero_stage " << stage);
  Twins t(dt, stage);
  auto &plain_model = t.plain_model, &zero_model = t.zero_model;
  auto &plain = *t.plain, &zero = *t.zero;
  auto plain_opt = sgd()(plain_model->parameters()), zero_opt = sgd()(zero_model->parameters());
  nn::SoftmaxCrossEntropy ce1, ce2;
  for (int64_t s = 0; s < 4; ++s) {
    Tensor x, y;
    global_batch(s, 3 * world.size(), dt, x, y);
    const int64_t r = world.rank();
    for (auto* p : {&plain, &zero}) {
      nn::SoftmaxCrossEntropy& ce = p == &plain ? ce1 : ce2;
      (p == &plain ? *plain_opt : *zero_opt).zero_grad();
      ce.forward(p->forward(rows(x, r * 3, 3)), rows(y, r * 3, 3));
      p->backward(ce.backward());
    }
    const double n1 = plain.clip_grad_norm(0.05), n2 = zero.clip_grad_norm(0.05);
    EXPECT_NEAR(n2, n1, 1e-12 * n1) << "step " << s;
    EXPECT_GT(n1, 0.05) << "the test wants the clipping to act";
    plain.step(*plain_opt);
    zero.step(*zero_opt);
    EXPECT_LE(max_abs_diff(*zero_model, *plain_model), 1e-12) << "step " << s;
  }
  EXPECT_TRUE(replicas_identical(*zero_model, world));
  }
}

// ---- moving the sharded state to another world size (ddp::reshard) --------------------------------
namespace {
// An exact value for element `pos` (its position in the buckets laid end to end) of state tensor q.
double marker(int64_t pos, int q) { return static_cast<double>(pos * 4 + q + 1); }

ddp::StateShard marked_part(const ddp::ShardLayout& L, int world, int rank, int per_run) {
  ddp::StateShard s;
  s.world = world;
  s.rank = rank;
  s.fresh = false;
  s.per_run = per_run;
  s.dtype = DType::F64;
  s.steps = 7;
  s.runs = L.runs(world, rank);
  for (const ddp::ShardRun& r : s.runs)
    for (int q = 0; q < per_run; ++q) {
      Tensor t({r.length}, DType::F64, Device::cpu());
      for (int64_t i = 0; i < r.length; ++i) t.data<double>()[i] = marker(L.position(r.param, r.offset + i), q);
      s.data.push_back(t);
    }
  return s;
}
}  // namespace

// Every (from, to) pair the world allows: each rank of the new world gets exactly its part, every
// element the value its old owner had (exact markers), and the ranks outside it nothing. The
// parts cover every element once: their sizes add up to the state.
TEST(DDPZero, ReshardMovesEachElementToItsNewOwner) {
  auto& world = comm::world();
  const int n = world.size(), me = world.rank();
  Twins t(DType::F64);
  const ddp::ShardLayout& L = t.zero->layout();
  for (int from = 1; from <= n; ++from)
    for (int to = 1; to <= n; ++to) {
      SCOPED_TRACE(testing::Message() << from << " -> " << to << " ranks of " << n);
      ddp::StateShard mine = me < from ? marked_part(L, from, me, 2) : ddp::StateShard{};
      ddp::StateShard got = ddp::reshard(world, L, std::move(mine), from, to);
      EXPECT_EQ(got.world, to);
      EXPECT_EQ(got.steps, 7);
      EXPECT_FALSE(got.fresh);
      int64_t held = 0;
      for (const Tensor& d : got.data) held += d.numel();
      EXPECT_EQ(world.allreduce_value<int64_t>(held, comm::ReduceOp::Sum), 2 * L.numel());
      if (me >= to) {
        EXPECT_TRUE(got.data.empty());
        continue;
      }
      ASSERT_EQ(got.runs, L.runs(to, me));
      ASSERT_EQ(got.data.size(), got.runs.size() * 2);
      for (size_t i = 0; i < got.runs.size(); ++i)
        for (int q = 0; q < 2; ++q) {
          const ddp::ShardRun& r = got.runs[i];
          const Tensor& d = got.data[i * 2 + static_cast<size_t>(q)];
          ASSERT_EQ(d.numel(), r.length);
          for (int64_t k = 0; k < r.length; ++k)
            ASSERT_EQ(d.data<double>()[k], marker(L.position(r.param, r.offset + k), q))
                << "run " << i << " element " << k << " of state tensor " << q;
        }
    }
  // A fresh state (no step yet) stays fresh, with nothing moved.
  ddp::StateShard fresh;
  fresh.world = n;
  fresh.rank = me;
  ddp::StateShard got = ddp::reshard(world, L, fresh, n, 1);
  EXPECT_TRUE(got.fresh);
  EXPECT_TRUE(got.data.empty());
}

// A sharded job of every rank hands its state to a sharded job of fewer ranks (a shrink in place):
// the state the smaller job holds is bitwise the unsharded optimizer's, with its step count.
TEST(DDPZero, ResumesBitwiseAfterAReshardToFewerRanks) {
  auto& world = comm::world();
  const int n = world.size(), me = world.rank();
  const DType dt = DType::F32;
  Twins t(dt);
  auto plain_opt = adamw()(t.plain_model->parameters()), zero_opt = adamw()(t.zero_model->parameters());
  nn::SoftmaxCrossEntropy ce1, ce2;
  for (int64_t s = 0; s < 4; ++s) {
    train_step(*t.plain, *plain_opt, ce1, s, 3, dt);
    train_step(*t.zero, *zero_opt, ce2, s, 3, dt);
  }
  const int to = std::max(1, n - 1);
  ddp::StateShard moved = ddp::reshard(world, t.zero->layout(), t.zero->take_optimizer_state(*zero_opt), n, to);
  EXPECT_FALSE(zero_opt->has_state()) << "taken out of the optimizer";
  auto sub = world.split(me < to ? 0 : comm::Communicator::kNoColor, me);
  if (!sub) return;
  ddp::DistributedDataParallel smaller(t.zero_model, *sub, {.bucket_cap_bytes = 3000, .first_bucket_bytes = 700, .zero_stage = 1});
  smaller.put_optimizer_state(std::move(moved), *zero_opt);
  EXPECT_EQ(zero_opt->steps(), plain_opt->steps());
  smaller.gather_optimizer_state(*zero_opt);
  const std::vector<Tensor*> a = plain_opt->state(), g = zero_opt->state();
  ASSERT_EQ(a.size(), g.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(a[i]->raw(), g[i]->raw(), a[i]->nbytes()), 0) << "state tensor " << i;
  // Another part than this rank's is refused.
  ddp::StateShard wrong;
  wrong.world = to + 1;
  wrong.rank = 0;
  EXPECT_THROW(smaller.put_optimizer_state(wrong, *zero_opt), Error);
}

TEST(DDPZero, RefusesWhatItCannotShard) {
  auto& world = comm::world();
  auto m = mlp(DType::F32);
  EXPECT_THROW(ddp::DistributedDataParallel(m, world, {.zero_stage = 3}), Error);
  if (world.size() < 2) return;
  ddp::DistributedDataParallel zero(m, world, {.zero_stage = 1});
  auto other = mlp(DType::F32);
  auto opt = adamw()(other->parameters());
  nn::SoftmaxCrossEntropy ce;
  Tensor x, y;
  global_batch(0, 2, DType::F32, x, y);
  ce.forward(zero.forward(x), y);
  zero.backward(ce.backward());
  try {
    zero.step(*opt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("build it over module().parameters()"), std::string::npos) << e.what();
  }
  // opt.step() in place of zero.step(opt) would update from the local gradients: the next
  // backward says so (on every rank alike).
  auto own = adamw()(m->parameters());
  own->step();
  ce.forward(zero.forward(x), y);
  try {
    zero.backward(ce.backward());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("call ddp.step(opt) instead of opt.step()"), std::string::npos) << e.what();
  }
  zero.skip_step();  // no update for that backward: the next one goes through
  ce.forward(zero.forward(x), y);
  zero.backward(ce.backward());
  zero.step(*own);
}
