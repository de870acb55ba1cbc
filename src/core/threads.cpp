// Thread-count control shared by OpenMP loops and Eigen's GEMM.
#include "edp/core/threads.h"

#include <dirent.h>
#include <omp.h>
#include <sched.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <sstream>
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
    apply_launch_binding();
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

int share_of_cores(int cores, int ranks) { return std::max(1, cores / std::max(1, ranks)); }

void bind_process(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d)) {
      const long tid = std::strtol(e->d_name, nullptr, 10);
      if (tid > 0) sched_setaffinity(static_cast<pid_t>(tid), sizeof set, &set);
    }
    closedir(d);
  } else {
    sched_setaffinity(0, sizeof set, &set);
  }
}

void apply_launch_binding() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string list = knobs::get_string("EDP_LAUNCH_CPUS");
    if (list.empty()) return;
    std::vector<int> cpus;
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');) {
      char* end = nullptr;
      const long c = std::strtol(item.c_str(), &end, 10);
      EDP_CHECK(!item.empty() && *end == '\0' && c >= 0 && c < CPU_SETSIZE, "EDP_LAUNCH_CPUS='", list,
                "': expected CPU numbers separated by commas");
      cpus.push_back(static_cast<int>(c));
    }
    bind_process(cpus);
  });
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
