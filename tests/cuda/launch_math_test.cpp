// The CPU-testable parts of the CUDA backend: launch-configuration math, the multi-tensor plan,
// the row-major → column-major mapping of Linear's three products onto cuBLASLt (checked by
// running the mapped column-major products on the CPU), the duplicate-GPU check that precedes
// NCCL, and the no-device report. Runs on every machine.
#include <gtest/gtest.h>

#include <set>

#include "edp/core/random.h"
#include "kernels/launch.h"
#include "edp/comm/nccl.h"
#include "edp/cuda/runtime.h"

namespace {
using namespace edp::cuda;

TEST(LaunchMath, GridSize) {
  EXPECT_EQ(grid_size(0, 256, 132), 0);
  EXPECT_EQ(grid_size(-5, 256, 132), 0);
  EXPECT_EQ(grid_size(1, 256, 132), 1);
  EXPECT_EQ(grid_size(256, 256, 132), 1);
  EXPECT_EQ(grid_size(257, 256, 132), 2);
  EXPECT_EQ(grid_size(int64_t{1} << 40, 256, 132), 132 * 8);  // capped: grid-stride loops
  EXPECT_EQ(grid_size(int64_t{1} << 40, 256, 0), 8);           // unknown SM count still launches
}

TEST(LaunchMath, Alignment) {
  alignas(16) float buf[8];
  EXPECT_TRUE(aligned16(buf));
  EXPECT_FALSE(aligned16(buf + 1));
  EXPECT_TRUE(aligned16(buf + 4));
}

TEST(LaunchMath, ChannelSplitsFillTheDeviceWithinBounds) {
  // 32 channels of 200k values on 132 SMs: several blocks per channel.
  const int64_t s = channel_splits(32, 200704, 132);
  EXPECT_GE(s * 32, 132);
  EXPECT_LE(s, 200704 / 4096);
  EXPECT_EQ(channel_splits(4096, 1 << 20, 132), 1);  // enough channels already
  EXPECT_EQ(channel_splits(3, 10, 132), 1);          // too little work to split
  EXPECT_EQ(channel_splits(0, 10, 132), 1);
  EXPECT_LE(channel_splits(1, int64_t{1} << 40, 132), 1024);
}

TEST(LaunchMath, ColumnSplitsFillTheDeviceWithinBounds) {
  // A GPT Linear's bias gradient, [8192 tokens, 512 outputs] on 132 SMs: 2 column blocks per
  // split, so the rows are split until about 4 blocks per SM run, each split >= 32 rows.
  const int64_t s = column_splits(512, 8192, 132);
  EXPECT_GE(s * ((512 + kColumnBlock - 1) / kColumnBlock), 132);
  EXPECT_LE(s, 8192 / 32);
  EXPECT_EQ(column_splits(1 << 20, 8192, 132), 1);  // enough column blocks already
  EXPECT_EQ(column_splits(10, 40, 132), 1);         // too few rows to split
  EXPECT_EQ(column_splits(0, 10, 132), 1);
  EXPECT_EQ(column_splits(10, 0, 132), 1);
  EXPECT_LE(column_splits(1, int64_t{1} << 40, 132), 65535);  // the grid's y limit
}

TEST(LaunchMath, SplitRangesPartitionExactly) {
  for (int64_t n : {0, 1, 7, 100, 1001})
    for (int64_t splits : {1, 2, 3, 7, 64}) {
      int64_t next = 0;
      for (int64_t s = 0; s < splits; ++s) {
        int64_t b, e;
        split_range(n, s, splits, b, e);
        EXPECT_EQ(b, next);
        EXPECT_LE(b, e);
        next = e;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(LaunchMath, ReduceBlocksDependOnSizeOnly) {
  EXPECT_EQ(reduce_blocks(0), 1);
  EXPECT_EQ(reduce_blocks(4096), 1);
  EXPECT_EQ(reduce_blocks(4097), 2);
  EXPECT_EQ(reduce_blocks(int64_t{1} << 40), 1024);
}

TEST(MultiTensorPlan, EveryChunkExactlyOnceWithinLimits) {
  MultiTensorLimits lim;
  lim.max_tensors = 4;
  lim.max_blocks = 10;
  lim.chunk = 100;
  const std::vector<int64_t> sizes = {1, 0, 250, 100, 1001, 5, 99, 0, 300, 7, 7, 7};
  const auto plan = plan_multi_tensor(sizes, lim);
  std::set<std::pair<int, int>> seen;
  for (const auto& l : plan) {
    EXPECT_LE(static_cast<int>(l.tensors.size()), lim.max_tensors);
    EXPECT_LE(static_cast<int>(l.block_tensor.size()), lim.max_blocks);
    EXPECT_FALSE(l.block_tensor.empty());
    ASSERT_EQ(l.block_tensor.size(), l.block_chunk.size());
    for (size_t b = 0; b < l.block_tensor.size(); ++b) {
      ASSERT_LT(l.block_tensor[b], static_cast<int>(l.tensors.size()));
      const int t = l.tensors[static_cast<size_t>(l.block_tensor[b])];
      EXPECT_GT(sizes[static_cast<size_t>(t)], 0) << "empty tensors get no blocks";
      EXPECT_TRUE(seen.insert({t, l.block_chunk[b]}).second) << "chunk twice: " << t << "/" << l.block_chunk[b];
    }
  }
  size_t expected = 0;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const int64_t chunks = (sizes[t] + lim.chunk - 1) / lim.chunk;
    expected += static_cast<size_t>(chunks);
    for (int64_t c = 0; c < chunks; ++c) EXPECT_TRUE(seen.count({static_cast<int>(t), static_cast<int>(c)}));
  }
  EXPECT_EQ(seen.size(), expected);
  EXPECT_GE(plan.size(), 3u);  // 1001 elements alone need 11 blocks > 10
  EXPECT_TRUE(plan_multi_tensor({}, lim).empty());
  EXPECT_TRUE(plan_multi_tensor({0, 0}, lim).empty());
}

// Column-major D[m, n] (+)= op(A)[m, k] · op(B)[k, n], exactly as cuBLASLt reads its operands.
void colmajor_gemm(const GemmSpec& g, const float* A, const float* B, float* D) {
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const float a = g.trans_a ? A[p + i * g.lda] : A[i + p * g.lda];
        const float b = g.trans_b ? B[j + p * g.ldb] : B[p + j * g.ldb];
        acc += static_cast<double>(a) * b;
      }
      float& d = D[i + j * g.ldd];
      d = static_cast<float>(acc + (g.beta != 0.0f ? g.beta * d : 0.0));
    }
}

TEST(LinearGemmMapping, RowMajorPassesMatchTheReference) {
  edp::Rng rng(7);
  for (auto [N, I, O] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1}, {3, 5, 2}, {7, 13, 5}, {4, 1, 9}}) {
    std::vector<float> x(static_cast<size_t>(N * I)), w(static_cast<size_t>(O * I)), dy(static_cast<size_t>(N * O));
    for (auto* v : {&x, &w, &dy})
      for (float& e : *v) e = static_cast<float>(rng.uniform(-1, 1));
    std::vector<float> dw0(static_cast<size_t>(O * I));
    for (float& e : dw0) e = static_cast<float>(rng.uniform(-1, 1));
    auto pick = [&](Operand o) -> const float* {
      return o == Operand::X ? x.data() : o == Operand::W ? w.data() : dy.data();
    };
    // y = x wᵀ
    std::vector<float> y(static_cast<size_t>(N * O));
    const GemmSpec gf = linear_gemm(LinearPass::Forward, N, I, O);
    colmajor_gemm(gf, pick(gf.a), pick(gf.b), y.data());
    // dx = dy w
    std::vector<float> dx(static_cast<size_t>(N * I));
    const GemmSpec gx = linear_gemm(LinearPass::GradInput, N, I, O);
    colmajor_gemm(gx, pick(gx.a), pick(gx.b), dx.data());
    // dw += dyᵀ x
    std::vector<float> dw = dw0;
    const GemmSpec gw = linear_gemm(LinearPass::GradWeight, N, I, O);
    EXPECT_EQ(gw.beta, 1.0f);
    colmajor_gemm(gw, pick(gw.a), pick(gw.b), dw.data());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o) {
        double r = 0;
        for (int64_t i = 0; i < I; ++i) r += static_cast<double>(x[n * I + i]) * w[o * I + i];
        EXPECT_NEAR(y[n * O + o], r, 1e-5) << "y[" << n << "," << o << "] for " << N << "x" << I << "x" << O;
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < I; ++i) {
        double r = 0;
        for (int64_t o = 0; o < O; ++o) r += static_cast<double>(dy[n * O + o]) * w[o * I + i];
        EXPECT_NEAR(dx[n * I + i], r, 1e-5) << "dx[" << n << "," << i << "]";
      }
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < I; ++i) {
        double r = dw0[o * I + i];
        for (int64_t n = 0; n < N; ++n) r += static_cast<double>(dy[n * O + o]) * x[n * I + i];
        EXPECT_NEAR(dw[o * I + i], r, 1e-5) << "dw[" << o << "," << i << "]";
      }
    // Stored operand shapes agree with the leading dimensions (what the layouts declare).
    for (const GemmSpec& g : {gf, gx, gw}) {
      EXPECT_GE(g.lda, g.a_rows());
      EXPECT_GE(g.ldb, g.b_rows());
      EXPECT_GE(g.ldd, g.m);
    }
  }
}

edp::comm::GpuIdentity gpu(uint8_t tag, const std::string& host, int dev) {
  edp::comm::GpuIdentity g;
  g.uuid.fill(0);
  g.uuid[0] = tag;
  g.uuid[15] = static_cast<uint8_t>(tag * 3);
  g.device = dev;
  g.pci_bus_id = "0000:0" + std::to_string(tag) + ":00.0";
  g.host = host;
  return g;
}

TEST(DuplicateGpuCheck, DistinctGpusPass) {
  EXPECT_EQ(edp::comm::duplicate_gpu_error({}), "");
  EXPECT_EQ(edp::comm::duplicate_gpu_error({gpu(1, "a", 0)}), "");
  // Same ordinal on two hosts (different UUIDs) is fine.
  EXPECT_EQ(edp::comm::duplicate_gpu_error({gpu(1, "a", 0), gpu(2, "b", 0), gpu(3, "a", 1)}), "");
}

TEST(DuplicateGpuCheck, SharedGpuNamesRanksAndTheRanksPerGpuPath) {
  const std::string m = edp::comm::duplicate_gpu_error(
      {gpu(1, "nodeA", 0), gpu(2, "nodeA", 1), gpu(1, "nodeA", 0), gpu(2, "nodeA", 1)});
  EXPECT_NE(m.find("ranks 0 and 2 (of 4)"), std::string::npos) << m;
  EXPECT_NE(m.find("0000:01:00.0"), std::string::npos) << m;
  EXPECT_NE(m.find("nodeA"), std::string::npos) << m;
  EXPECT_NE(m.find("edprun --ranks-per-gpu"), std::string::npos) << m;
  const std::string three = edp::comm::duplicate_gpu_error({gpu(5, "h", 0), gpu(5, "h", 0), gpu(5, "h", 0)});
  EXPECT_NE(three.find("ranks 0, 1 and 2 (of 3)"), std::string::npos) << three;
}

TEST(DuplicateGpuCheck, WireFormatRoundTrips) {
  edp::comm::GpuIdentity g = gpu(9, std::string(200, 'h'), 3);
  g.uuid[7] = 0xAB;
  const auto bytes = edp::comm::pack_gpu_identity(g);
  const auto back = edp::comm::unpack_gpu_identity(bytes.data());
  EXPECT_EQ(back.uuid, g.uuid);
  EXPECT_EQ(back.device, 3);
  EXPECT_EQ(back.pci_bus_id, g.pci_bus_id);
  EXPECT_EQ(back.host, std::string(79, 'h'));  // truncated to its field, still terminated
  edp::comm::GpuIdentity neg = gpu(1, "x", -1);
  EXPECT_EQ(edp::comm::unpack_gpu_identity(edp::comm::pack_gpu_identity(neg).data()).device, -1);
}

TEST(Runtime, NoDeviceIsReportedWithAReason) {
  if (available()) {
    EXPECT_GT(device_count(), 0);
    EXPECT_EQ(unavailable_reason(), "");
  } else {
    EXPECT_EQ(device_count(), 0);
    EXPECT_EQ(unavailable_reason().rfind("no CUDA device", 0), 0u) << unavailable_reason();
    EXPECT_FALSE(edp::comm::nccl_available());
  }
}

TEST(Runtime, Tf32SwitchDefaultsOnAndToggles) {
  const bool before = tf32_enabled();
  set_tf32(false);
  EXPECT_FALSE(tf32_enabled());
  set_tf32(true);
  EXPECT_TRUE(tf32_enabled());
  set_tf32(before);
}

}  // namespace
