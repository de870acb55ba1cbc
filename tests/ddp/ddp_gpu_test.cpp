// DistributedDataParallel on the GPU under mpirun (labelled gpu; skips with the reason without a
// CUDA device). Each rank trains a small MLP on the GPU on its share of every global batch; one
// CPU replica in every process trains on the whole global batch. Ranks use device
// local_rank % devices: when more ranks than GPUs are on a host (the single-GPU test machine,
// np 2 and 4) they share a GPU and the gradients go through the colocated communicator
// (edprun --ranks-per-gpu), otherwise through NCCL, whose buckets DDP enqueues from the
// backward thread (stream-ordered path); unsharded and with the optimizer state sharded (zero 1).
// Checked after every step:
//  - the replicas are bitwise identical across ranks;
//  - they match the CPU replica within 1e-4: TF32 is off, so GPU and CPU differ only in the
//    order of float32 sums (GEMM blocking, reduction trees, the bucketed allreduce), ~1e-6
//    relative per step on values of order 0.1-1, and 6 SGD steps with lr 0.1 keep the
//    accumulated difference well below 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "edp/comm/colocated.h"
#include "edp/comm/communicator.h"
#include "edp/core/random.h"
#include "edp/comm/nccl.h"
#include "edp/cuda/runtime.h"
#include "edp/ddp/ddp.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"

using namespace edp;

namespace {

std::shared_ptr<nn::Sequential> mlp() {
  manual_seed(11);
  auto m = nn::make<nn::Sequential>();
  m->add(nn::make<nn::Linear>(24, 48), "fc1");
  m->add(nn::make<nn::ReLU>(), "relu");
  m->add(nn::make<nn::Linear>(48, 48), "fc2");
  m->add(nn::make<nn::GELU>(), "gelu");
  m->add(nn::make<nn::Linear>(48, 6), "fc3");
  return m;
}

void global_batch(int64_t s, int64_t n, Tensor& x, Tensor& y) {
  Rng rng(derive_seed(91, static_cast<uint64_t>(s)));
  x = Tensor({n, 24}, DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rng.normal());
  y = Tensor({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(6));
}

// Host copies of a model's parameters, in order.
std::vector<Tensor> host_params(nn::Module& m) {
  std::vector<Tensor> out;
  for (nn::Parameter* p : m.parameters()) out.push_back(p->value.to(Device::cpu()));
  return out;
}

// zero 1: the optimizer state sharded over the ranks (each bucket reduce-scattered, this rank's
// parts updated, the parameters allgathered on the device): the same replicas and the same
// tolerance against the CPU replica (the update of an element is the unsharded one). zero 2: the
// gradients too (released into the buckets on the compute stream, the buffers freed after the
// reduction): the same, and no parameter keeps a gradient after a step.
void matches_one_cpu_process(int zero) {
  comm::Communicator& world = comm::world();
  const int W = world.size(), r = world.rank();
  const int ndev = cuda::device_count();
  const int dev = world.local_rank() % ndev;
  cuda::set_device(dev);
  cuda::set_tf32(false);
  const bool shared = world.local_size() > ndev;
  std::unique_ptr<comm::Communicator> c =
      shared ? comm::make_colocated_communicator(world) : comm::make_nccl_communicator(world, dev);
  EXPECT_TRUE(c->device_buffers());
  EXPECT_EQ(c->stream_ordered(), !shared) << c->backend();
  if (r == 0) std::printf("[ info ] %d rank(s), %d device(s), communicator %s\n", W, ndev, c->backend().c_str());

  auto model = mlp();
  model->set_input_grad(false);
  model->to(Device::cuda(dev));
  auto ref = mlp();
  ref->set_input_grad(false);
  // Small buckets so that several are in flight during backward.
  ddp::DistributedDataParallel dmodel(model, *c,
                                     {.bucket_cap_bytes = 8 << 10, .first_bucket_bytes = 4 << 10, .zero_stage = zero});
  EXPECT_GE(dmodel.buckets().size(), 2u);
  EXPECT_EQ(dmodel.sharded(), zero >= 1 && W > 1);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::SoftmaxCrossEntropy ce, ref_ce;
  const int64_t b = 8;
  for (int64_t s = 0; s < 6; ++s) {
    Tensor x, y;
    global_batch(s, b * W, x, y);
    opt.zero_grad();
    const Tensor xl = x.narrow(r * b, b).clone().to(Device::cuda(dev));
    const Tensor yl = y.narrow(r * b, b).clone().to(Device::cuda(dev));
    ce.forward(dmodel.forward(xl), yl);
    dmodel.backward(ce.backward());
    dmodel.step(opt);  // opt.step() unless sharded
    ref_opt.zero_grad();
    ref_ce.forward(ref->forward(x), y);
    ref->backward(ref_ce.backward());
    ref_opt.step();

    const std::vector<Tensor> got = host_params(*model), want = host_params(*ref);
    ASSERT_EQ(got.size(), want.size());
    double diff = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      const int64_t words = got[k].numel();
      std::vector<int32_t> bits(static_cast<size_t>(words));
      std::memcpy(bits.data(), got[k].raw(), got[k].nbytes());
      std::vector<int32_t> lo = bits, hi = bits;
      world.allreduce(lo.data(), lo.data(), words, DType::I32, comm::ReduceOp::Min);
      world.allreduce(hi.data(), hi.data(), words, DType::I32, comm::ReduceOp::Max);
      EXPECT_EQ(lo, hi) << "parameter " << k << " differs across ranks after step " << s;
      for (int64_t i = 0; i < words; ++i)
        diff = std::max(diff, std::abs(static_cast<double>(got[k].data<float>()[i]) - want[k].data<float>()[i]));
    }
    EXPECT_LE(diff, 1e-4) << "step " << s << " on " << W << " rank(s), " << c->backend() << ", zero " << zero;
    if (zero == 2 && W > 1)
      for (const nn::Parameter* p : model->parameters()) EXPECT_FALSE(p->grad.defined()) << p->name << ", step " << s;
  }
  if (zero >= 1 && W > 1) {  // each rank holds its part of the momentum: the parts make the whole
    const int64_t mine = dmodel.optimizer_state_bytes(opt);
    int64_t full = 0;
    for (nn::Parameter* p : model->parameters()) full += static_cast<int64_t>(p->value.nbytes());
    EXPECT_EQ(world.allreduce_value<int64_t>(mine, comm::ReduceOp::Sum), full);
    // Taken to host memory and put back: the next step goes on from it.
    dmodel.put_optimizer_state(dmodel.take_optimizer_state(opt), opt);
    EXPECT_EQ(dmodel.optimizer_state_bytes(opt), mine);
  }
}

}  // namespace

TEST(DdpGpu, MatchesOneCpuProcessAndKeepsReplicasIdentical) {
  if (!cuda::available()) GTEST_SKIP() << cuda::unavailable_reason();
  matches_one_cpu_process(0);
}

TEST(DdpGpu, ShardedMatchesOneCpuProcessAndKeepsReplicasIdentical) {
  if (!cuda::available()) GTEST_SKIP() << cuda::unavailable_reason();
  matches_one_cpu_process(1);
}

TEST(DdpGpu, ShardedGradientsMatchOneCpuProcessAndKeepReplicasIdentical) {
  if (!cuda::available()) GTEST_SKIP() << cuda::unavailable_reason();
  matches_one_cpu_process(2);
}
