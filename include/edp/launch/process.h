// Process identity across pid reuse: a (pid, start time) pair names one process, so a record
// written by a launcher (edprun's owner.json and mpirun.pid, edp-autoscale serve's keeper.json)
// can tell a live owner from a pid that now belongs to another process.
#pragma once

namespace edp::launch {

// Start time of a live process in clock ticks since boot (/proc/<pid>/stat field 22); 0 when
// there is no such process or it is a zombie (finished; only its parent's wait is missing).
unsigned long long process_start_time(long pid);

}  // namespace edp::launch
