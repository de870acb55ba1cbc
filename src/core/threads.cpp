// Thread-count control shared by OpenMP loops and Eigen's GEMM.
#include "edp/core/threads.h"

#include <omp.h>
#include <sched.h>

#include <Eigen/Core>
#include <cstdlib>
#include <string>

#include "edp/core/error.h"
#include "edp/core/knobs.h"

namespace edp {

namespace {
int initial_threads() {
  return static_cast<int>(knobs::get_int("EDP_NUM_THREADS", available_cores()));
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
  current() = n;
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int num_threads() { return current(); }

}  // namespace edp
