// Intra-op threading of the CPU backend (OpenMP + Eigen). The count defaults to EDP_NUM_THREADS,
// else the cores this process may run on (its CPU affinity mask), and is settable at run time.
#pragma once

namespace edp {

// Sets the thread count used by CPU ops from now on (n >= 1).
void set_num_threads(int n);
int num_threads();
// Cores available to this process (sched_getaffinity), at least 1.
int available_cores();

}  // namespace edp
