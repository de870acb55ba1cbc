// Intra-op threading of the CPU backend (OpenMP + Eigen). The count defaults to EDP_NUM_THREADS,
// else the cores this process may run on (its CPU affinity mask), and is settable at run time.
#pragma once
#include <vector>

namespace edp {

// Sets the thread count used by CPU ops from now on (n >= 1).
void set_num_threads(int n);
int num_threads();
// Cores available to this process (sched_getaffinity), at least 1.
int available_cores();
// The compute threads of one of `ranks` processes that share `cores` unbound: an equal share,
// at least 1 (more ranks than cores: one thread each). The one rule for "cores / ranks on the
// host", used by edprun's plan, the layout after a rescale and the examples' default.
int share_of_cores(int cores, int ranks);

// Binds every thread of this process to `cpus` (sched_setaffinity of each task).
void bind_process(const std::vector<int>& cpus);

// Binds this process to the CPUs its launcher planned for it (EDP_LAUNCH_CPUS, a list such as
// "2,3" from edprun's rank shim); once, and a no-op without the variable. Called by
// comm::Environment and before the first parallel op. edprun starts a rank on all of its host's
// cores and edp binds it here, after the OpenMP runtime has started: libgomp counts the cores a
// process may use once, when it loads, and a process that starts on one core spins its threads
// only briefly and then sleeps between parallel regions whenever it runs more threads than that
// count, for its whole life — after a shrink gives a rank both cores of a 2-core host, its MLP ran
// at 0.43x the speed of a job started on them (measured).
void apply_launch_binding();

}  // namespace edp
