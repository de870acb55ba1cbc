// Cache-line ping-pong between pairs of CPUs: one thread pinned to each, passing a counter back and
// forth through one atomic; the round trip is the time of a store on one CPU becoming visible on
// the other and back. Prints one JSON line:
//   {"bench": "core_latency", "round_trips": 200000, "pairs": [{"a": 0, "b": 1, "round_trip_ns": 55.1}],
//    "max_round_trip_ns": 55.1}
//   edp_bench_core_latency [--round-trips N]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "edp/core/cli.h"

namespace {

bool pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0;
}

double round_trip_ns(int a, int b, long n) {
  alignas(64) static std::atomic<long> flag;
  flag.store(0);
  std::atomic<bool> pinned{false}, failed{false};
  std::thread other([&] {
    if (!pin(b)) failed = true;
    pinned = true;
    for (long i = 0; i < n && !failed; ++i) {
      while (flag.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (!pin(a)) failed = true;
  while (!pinned) {
  }
  if (failed) {
    other.join();
    return -1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    flag.store(2 * i + 1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  other.join();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  edp::cli::Options o("edp_bench_core_latency", "Round-trip latency between pairs of cores.");
  o.add("round-trips", "200000", "round trips per pair of cores").int_range(1, 1000000000);
  o.parse(argc, argv);
  const long n = static_cast<long>(o.i64("round-trips"));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    std::perror("sched_getaffinity");
    return 1;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  nlohmann::json pairs = nlohmann::json::array();
  double worst = 0;
  for (size_t i = 0; i < cpus.size(); ++i)
    for (size_t j = i + 1; j < cpus.size(); ++j) {
      const double ns = round_trip_ns(cpus[i], cpus[j], n);
      if (ns < 0) {
        std::fprintf(stderr, "edp_bench_core_latency: cannot pin threads to CPUs %d and %d\n", cpus[i], cpus[j]);
        return 1;
      }
      pairs.push_back({{"a", cpus[i]}, {"b", cpus[j]}, {"round_trip_ns", std::round(ns * 10) / 10}});
      worst = std::max(worst, ns);
    }
  if (pairs.empty()) {
    std::fprintf(stderr, "edp_bench_core_latency: this process may run on one CPU only; no pair to measure\n");
    return 1;
  }
  std::printf("%s\n", nlohmann::json{{"bench", "core_latency"},
                                     {"round_trips", n},
                                     {"pairs", pairs},
                                     {"max_round_trip_ns", std::round(worst * 10) / 10}}
                          .dump()
                          .c_str());
  return 0;
}
