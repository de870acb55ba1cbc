// Thread-count control shared by OpenMP loops and Eigen's GEMM.
#include "edp/core/threads.h"

#include <omp.h>
#include <sched.h>

#include <Eigen/Core>
#include <cstdlib>
#include <string>

#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"

namespace edp {

namespace {
// More threads than cores only slows Eigen and OpenMP down (20x measured with 64 on 2 cores),
// and an absurd count exhausts the process: the host's count is used instead, with a warning.
int clamp_to_cores(int64_t n, const char* from) {
  const int cores = available_cores();
  if (n <= cores) return static_cast<int>(n);
  log::warn(from, " asks for ", n, " threads but this process has ", cores, " core(s); using ", cores);
  return cores;
}

int initial_threads() {
  const int64_t n = knobs::get_int("EDP_NUM_THREADS", available_cores());
  EDP_CHECK(n >= 1, "EDP_NUM_THREADS=", n, ": need at least one thread");
  return clamp_to_cores(n, "EDP_NUM_THREADS");
}

int& current() {
  static int n = [] {
    int t = initial_threads();
    omp_set_num_threads(t);
    Eigen::setNbThreads(t);
    return t;
  }();
  return n;
}
}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return 1;
}

void set_num_threads(int n) {
  EDP_CHECK(n >= 1, "set_num_threads(", n, "): need at least one thread");
  n = clamp_to_cores(n, "set_num_threads");
  current() = n;
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int num_threads() { return current(); }

}  // namespace edp
