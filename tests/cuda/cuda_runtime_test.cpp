// The device runtime on a real GPU: tensor copies and fills for every dtype, views, device
// errors, streams and events, the caching allocator's steady state in a real training loop (no
// cudaMalloc after warm-up), the asynchronous uploader, and whole models trained on the GPU
// against the same models trained on the CPU (same seed, same batches).
//
// Tolerances: copies and fills exact. Training with EDP_TF32=0: per-step losses within 1e-4
// relative after 5 SGD steps (float32 GEMMs and convolutions summed in other orders drift by
// ~1e-6 per step); with TF32 (the default): within 2e-2.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "common/models.h"
#include "edp/backend/ops.h"
#include "edp/backend/cuda_ops.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"
#include "gpu_test_util.h"

namespace {
using namespace edp;
using namespace edp::test;

const auto* const g_env = ::testing::AddGlobalTestEnvironment(new PoisonEnvironment);

class CudaRuntime : public ::testing::Test {
 protected:
  void SetUp() override { EDP_REQUIRE_GPU(); }
  void TearDown() override { cuda::set_tf32(true); }
};

TEST_F(CudaRuntime, DeviceInfoIsPlausible) {
  const cuda::DeviceInfo d = cuda::device_info(0);
  EXPECT_FALSE(d.name.empty());
  EXPECT_GT(d.sm_count, 0);
  EXPECT_GE(d.cc_major, 7);
  EXPECT_GT(d.total_memory, size_t{1} << 30);
  EXPECT_EQ(d.pci_bus_id.size(), 12u) << d.pci_bus_id;  // "0000:3b:00.0"
  EXPECT_EQ(d.uuid_str().rfind("GPU-", 0), 0u);
  std::printf("device 0: %s, %d SMs, cc %d.%d, %.1f GiB, %s, %s\n", d.name.c_str(), d.sm_count, d.cc_major,
              d.cc_minor, d.total_memory / 1073741824.0, d.pci_bus_id.c_str(), d.uuid_str().c_str());
}

TEST_F(CudaRuntime, CopiesAndFillsEveryDtype) {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor cpu({1003}, t);
    for (int64_t i = 0; i < cpu.numel(); ++i) {
      const double v = static_cast<double>((i * 37) % 251);
      switch (t) {
        case DType::F32: cpu.data<float>()[i] = static_cast<float>(v) - 0.25f; break;
        case DType::F64: cpu.data<double>()[i] = v - 0.125; break;
        case DType::I32: cpu.data<int32_t>()[i] = static_cast<int32_t>(v) - 100; break;
        case DType::I64: cpu.data<int64_t>()[i] = (static_cast<int64_t>(v) << 33) - 5; break;
        case DType::U8: cpu.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
        case DType::BF16: cpu.data<bfloat16>()[i] = to_bfloat16(static_cast<float>(v)); break;
      }
    }
    const Tensor dev = cpu.to(gpu());
    EXPECT_TRUE(dev.device().is_cuda());
    const Tensor back = dev.to(Device::cpu());
    EXPECT_EQ(std::memcmp(back.raw(), cpu.raw(), cpu.nbytes()), 0);
    EXPECT_TRUE(dev.to(gpu()).same_storage(dev)) << "same-device to() is shallow";
    const Tensor d2 = dev.clone();  // device to device
    EXPECT_EQ(std::memcmp(d2.to(Device::cpu()).raw(), cpu.raw(), cpu.nbytes()), 0);
    for (double v : {0.0, -0.0, 3.5, -7.0, 200.0}) {
      if (t == DType::U8 && v < 0) continue;  // out of uint8's range: undefined in C++
      Tensor f({517}, t, gpu()), ref({517}, t);
      f.fill(v);
      ref.fill(v);
      EXPECT_EQ(std::memcmp(f.to(Device::cpu()).raw(), ref.raw(), ref.nbytes()), 0) << "fill " << v;
    }
    Tensor z({33}, t, gpu());
    z.zero();
    const Tensor zc = z.to(Device::cpu());
    for (int64_t i = 0; i < 33; ++i) EXPECT_EQ(zc.item(i), 0.0);
  }
  Tensor big({5}, DType::I64, gpu());
  big.fill(static_cast<double>(int64_t{1} << 40));
  EXPECT_EQ(big.to(Device::cpu()).data<int64_t>()[4], int64_t{1} << 40);
}

TEST_F(CudaRuntime, ViewsCopyTheRightBytes) {
  const Tensor a = randn({10, 3}, 1);
  const Tensor d = a.to(gpu());
  const Tensor rows = d.narrow(4, 3).to(Device::cpu());
  EXPECT_TRUE(same(rows, a.narrow(4, 3).clone(), "narrow"));
  Tensor dst = Tensor::zeros({10, 3}, DType::F32, gpu());
  Tensor part = dst.narrow(2, 5);
  part.copy_from(a.narrow(5, 5));  // host → device into a view
  Tensor expect = Tensor::zeros({10, 3});
  expect.narrow(2, 5).copy_from(a.narrow(5, 5));
  EXPECT_TRUE(same(dst, expect, "copy into a device view"));
  EXPECT_TRUE(same(d.reshape({3, 10}), a.reshape({3, 10}), "reshape"));
}

TEST_F(CudaRuntime, BadDeviceIsAClearError) {
  try {
    Tensor t({4}, DType::F32, Device::cuda(cuda::device_count()));
    FAIL() << "allocation on a missing device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("requested but"), std::string::npos) << e.what();
  }
  EXPECT_THROW(randn({4}, 1).to(gpu()).item(0), Error);  // item() needs the CPU
}

TEST_F(CudaRuntime, StreamsEventsAndGuards) {
  cuda::Stream s(0);
  EXPECT_EQ(cuda::current_stream(0), nullptr);
  const Tensor x = randn({1 << 16}, 3);
  const Tensor ref = ops::relu_forward(x);
  Tensor y;
  {
    cuda::StreamGuard g(0, s.handle());
    EXPECT_EQ(cuda::current_stream(0), s.handle());
    cuda::Event start(true), stop(true);
    start.record(s.handle());
    y = ops::relu_forward(x.to(gpu()));
    stop.record(s.handle());
    stop.synchronize();
    EXPECT_TRUE(stop.query());
    EXPECT_GE(stop.elapsed_ms(start), 0.0f);
    cuda::Event done;
    done.record(s.handle());
    done.block(nullptr);  // the default stream waits for s
  }
  EXPECT_EQ(cuda::current_stream(0), nullptr);
  EXPECT_TRUE(same(y, ref, "relu on a side stream"));
}

// One training step of the Fashion-MNIST CNN at batch 64.
double train_step(nn::Sequential& m, optim::SGD& opt, const Tensor& x, const Tensor& y) {
  nn::SoftmaxCrossEntropy ce;
  opt.zero_grad();
  const double loss = ce.forward(m.forward(x), y);
  m.backward(ce.backward());
  opt.step();
  return loss;
}

TEST_F(CudaRuntime, TrainingStepsReachAnAllocatorSteadyState) {
  manual_seed(3);
  auto model = examples::fashion_mnist_cnn();
  model->set_input_grad(false);
  model->to(gpu());
  optim::SGD opt(model->parameters(), {0.05, 0.9, 0.0, 5e-4, true});
  const Tensor x = randn({64, 1, 28, 28}, 4).to(gpu());
  const Tensor y = labels(64, 10, 5).to(gpu());
  for (int i = 0; i < 3; ++i) train_step(*model, opt, x, y);  // warm-up: plans, workspaces
  cuda::synchronize(0);
  const auto warm = cuda::allocator_stats(0);
  for (int i = 0; i < 5; ++i) train_step(*model, opt, x, y);
  cuda::synchronize(0);
  const auto st = cuda::allocator_stats(0);
  EXPECT_EQ(st.raw_allocs, warm.raw_allocs) << "cudaMalloc in the steady state";
  EXPECT_EQ(st.raw_frees, warm.raw_frees);
  EXPECT_GT(st.cache_hits, warm.cache_hits);
  std::printf("allocator: peak allocated %.1f MiB, reserved %.1f MiB, cached %.1f MiB, %lld cudaMalloc\n",
              st.peak_allocated_bytes / 1048576.0, st.reserved_bytes / 1048576.0, st.cached_bytes / 1048576.0,
              static_cast<long long>(st.raw_allocs));
}

TEST_F(CudaRuntime, UploaderDeliversEveryBatchIntact) {
  cuda::AsyncUploader up(gpu(), 2);
  std::vector<Tensor> host, dev;
  for (int i = 0; i < 12; ++i) {
    host.push_back(randn({256, 1, 28, 28}, 100 + static_cast<uint64_t>(i)));
    dev.push_back(up.upload(host.back()));
    // Used at once on the compute stream: ordered after the copy by the event.
    Tensor twice = dev.back().clone();
    ops::scale_(twice, 2.0);
    Tensor expect = host.back().clone();
    ops::scale_(expect, 2.0);
    EXPECT_TRUE(same(twice, expect, "used right after upload " + std::to_string(i)));
  }
  // Staging slots were reused many times; earlier uploads are untouched.
  for (size_t i = 0; i < host.size(); ++i) EXPECT_TRUE(same(dev[i], host[i], "upload " + std::to_string(i)));
  dev.clear();  // freed with pending compute-stream events (record_stream)
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(same(up.upload(host[static_cast<size_t>(i)]), host[static_cast<size_t>(i)], "again"));
  const Tensor labels_dev = up.upload(labels(256, 10, 1));
  EXPECT_EQ(labels_dev.dtype(), DType::I32);
}

// The same model, seed and batches on CPU and GPU: the losses follow each other.
void compare_training(const std::function<std::shared_ptr<nn::Sequential>()>& build, bool tf32,
                      double rel_tol, const Shape& in_shape, int64_t classes) {
  cuda::set_tf32(tf32);
  manual_seed(11);
  auto cpu_model = build();
  manual_seed(11);
  auto gpu_model = build();
  gpu_model->to(gpu());
  optim::SGD oc(cpu_model->parameters(), {0.05, 0.9, 0.0, 5e-4, true});
  optim::SGD og(gpu_model->parameters(), {0.05, 0.9, 0.0, 5e-4, true});
  for (int step = 0; step < 5; ++step) {
    const Tensor x = randn(in_shape, 50 + static_cast<uint64_t>(step));
    const Tensor y = labels(in_shape[0], classes, 60 + static_cast<uint64_t>(step));
    const double lc = train_step(*cpu_model, oc, x, y);
    const double lg = train_step(*gpu_model, og, x.to(gpu()), y.to(gpu()));
    EXPECT_NEAR(lg, lc, rel_tol * std::fabs(lc)) << "step " << step << " tf32=" << tf32;
  }
  cuda::set_tf32(true);
}

TEST_F(CudaRuntime, FashionMnistCnnTrainsLikeOnTheCpu) {
  compare_training(examples::fashion_mnist_cnn, false, 1e-4, {32, 1, 28, 28}, 10);
  compare_training(examples::fashion_mnist_cnn, true, 2e-2, {32, 1, 28, 28}, 10);
}

TEST_F(CudaRuntime, ResidualBatchNormDropoutGeluModelTrainsLikeOnTheCpu) {
  auto build = [] {
    auto m = nn::make<nn::Sequential>();
    m->add(nn::make<nn::Conv2d>(3, 8, 3, 1, 1, false), "stem");
    m->add(nn::make<nn::BatchNorm2d>(8), "bn");
    m->add(nn::make<nn::GELU>(), "gelu");
    m->add(nn::make<nn::ResidualBlock>(8, 16, 2), "block");
    m->add(nn::make<nn::MaxPool2d>(2), "pool");
    m->add(nn::make<nn::GlobalAvgPool2d>(), "gap");
    m->add(nn::make<nn::Dropout>(0.25, 7), "drop");
    m->add(nn::make<nn::Linear>(16, 5), "fc");
    return m;
  };
  compare_training(build, false, 1e-4, {6, 3, 12, 12}, 5);
}

}  // namespace
