// edp_bench_colocated: allreduce of device buffers among K ranks sharing one GPU (or K per GPU on
// several), the colocated communicator against the fallback (MPI through host memory:
// device->host copy, MPI_Allreduce via edp's MPI communicator, host->device copy), measured in
// the same run on the same buffers, in the format of nccl-tests: size sweep, warm-up, median of
// timed iterations (the slowest rank's time), algbw = bytes/time, busbw = algbw * 2(n-1)/n, a
// #wrong column from a separate check pass with integer-valued inputs (exact).
//
//   edprun -np 4 --ranks-per-gpu 4 -- build/bench/colocated/edp_bench_colocated -b 1M -e 64M -f 4
//
// Goal: colocated >= 5x the host path in busbw at 64 MiB with K = 2 and 4.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "edp/comm/colocated.h"
#include "edp/comm/communicator.h"
#include "edp/config.h"
#include "edp/launch/placement.h"

using edp::DType;
using namespace edp::comm;

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw edp::Error(std::string(what) + ": " + cudaGetErrorString(e));
}

int64_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  const std::string u = end ? end : "";
  if (u == "K") v *= 1024;
  else if (u == "M") v *= 1024 * 1024;
  else if (u == "G") v *= 1024.0 * 1024 * 1024;
  else if (!u.empty()) throw edp::Error(std::string("bad size '") + s + "': use e.g. 64K, 32M");
  return static_cast<int64_t>(v);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One timed call: the slowest rank's seconds.
template <typename F>
double timed(Communicator& w, F&& f) {
  w.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return w.allreduce_value(s, ReduceOp::Max);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t minb = 1 << 20, maxb = 64 << 20;
  double factor = 4;
  int warmup = 3, iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "-b") minb = parse_bytes(argv[i + 1]);
    else if (a == "-e") maxb = parse_bytes(argv[i + 1]);
    else if (a == "-f") factor = std::atof(argv[i + 1]);
    else if (a == "-w") warmup = std::atoi(argv[i + 1]);
    else if (a == "-n") iters = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: edp_bench_colocated [-b min] [-e max] [-f factor] [-w warmup] [-n iters]\n");
      return 2;
    }
  }
  return run_main(argc, argv, [&](Communicator& world) {
    const auto place = edp::launch::placement_from_env();
    edp::launch::check_placement(place);
    int ndev = 0;
    cuda_ok(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
    cuda_ok(cudaSetDevice(place.cuda_device >= 0 ? place.cuda_device : world.local_rank() % ndev), "cudaSetDevice");
    auto colo = make_colocated_communicator(world);
    const int W = world.size();
    const bool root = world.rank() == 0;
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    if (root)
      std::printf("# edp_bench_colocated: %d ranks, %d per GPU (%s), MPS %s, device %s, edp %s\n"
                  "#%12s %12s %10s %10s %6s %10s %10s %6s %8s\n",
                  W, place.gpu_ranks, place.from_edprun ? "edprun" : "mpirun", place.mps ? "on" : "off", prop.name,
                  EDP_VERSION, "size(B)", "count", "colo(us)", "busbw", "#wrong", "host(us)", "busbw", "#wrong", "ratio");
    std::string json = "{\"bench\": \"colocated_allreduce\", \"ranks\": " + std::to_string(W) +
                       ", \"ranks_per_gpu\": " + std::to_string(place.gpu_ranks) + ", \"mps\": " +
                       (place.mps ? "true" : "false") + ", \"device\": \"" + prop.name + "\", \"sizes\": [";
    double ratio_at_max = 0;
    for (int64_t bytes = minb; bytes <= maxb; bytes = static_cast<int64_t>(bytes * factor)) {
      const int64_t n = bytes / 4;
      std::vector<float> h(static_cast<size_t>(n)), hsum(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) h[i] = static_cast<float>((world.rank() + i) % 13);
      float* d = nullptr;
      cuda_ok(cudaMalloc(&d, bytes), "cudaMalloc");
      auto reset = [&] { cuda_ok(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice), "H2D"); };
      auto colo_call = [&] { colo->allreduce(d, d, n, DType::F32, ReduceOp::Sum); };
      auto host_call = [&] {
        cuda_ok(cudaMemcpy(hsum.data(), d, bytes, cudaMemcpyDeviceToHost), "D2H");
        world.allreduce(hsum.data(), hsum.data(), n, DType::F32, ReduceOp::Sum);
        cuda_ok(cudaMemcpy(d, hsum.data(), bytes, cudaMemcpyHostToDevice), "H2D");
      };
      auto wrong = [&](auto call) {  // a separate check pass, exact
        reset();
        call();
        std::vector<float> got(static_cast<size_t>(n));
        cuda_ok(cudaMemcpy(got.data(), d, bytes, cudaMemcpyDeviceToHost), "D2H");
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < W; ++q) want += static_cast<float>((q + i) % 13);
          bad += got[i] != want;
        }
        return world.allreduce_value(bad, ReduceOp::Sum);
      };
      const int64_t wrong_colo = wrong(colo_call), wrong_host = wrong(host_call);
      std::vector<double> tc, th;
      for (int i = 0; i < warmup; ++i) {
        colo_call();
        host_call();
      }
      for (int i = 0; i < iters; ++i) {  // alternate so that drift hits both alike
        tc.push_back(timed(world, colo_call));
        th.push_back(timed(world, host_call));
      }
      cudaFree(d);
      const double mc = median(tc), mh = median(th);
      const double bus = 2.0 * (W - 1) / std::max(1, W);
      const double bc = bytes / mc / 1e9 * bus, bh = bytes / mh / 1e9 * bus;
      ratio_at_max = mh / mc;
      if (root) {
        std::printf(" %12lld %12lld %10.1f %10.2f %6lld %10.1f %10.2f %6lld %8.2f\n", static_cast<long long>(bytes),
                    static_cast<long long>(n), mc * 1e6, bc, static_cast<long long>(wrong_colo), mh * 1e6, bh,
                    static_cast<long long>(wrong_host), mh / mc);
        json += (json.back() == '[' ? "" : ", ") + std::string("{\"bytes\": ") + std::to_string(bytes) +
                ", \"colocated_us\": " + std::to_string(mc * 1e6) + ", \"colocated_busbw_gbs\": " + std::to_string(bc) +
                ", \"host_us\": " + std::to_string(mh * 1e6) + ", \"host_busbw_gbs\": " + std::to_string(bh) +
                ", \"wrong\": " + std::to_string(wrong_colo + wrong_host) + "}";
      }
    }
    if (root) {
      std::printf("# colocated / host speed-up at the largest size: %.2fx (goal >= 5x at 64 MiB)\n", ratio_at_max);
      std::printf("%s], \"speedup_at_max\": %.3f}\n", json.c_str(), ratio_at_max);
    }
    return 0;
  });
}
