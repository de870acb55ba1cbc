// Which process, on which host: identities that survive pid reuse, for records that other
// processes check later (a checkpoint directory's lock, edprun's owner record, the autoscaler's
// keepers). A (pid, start time) pair names one process; the host and the pid namespace say where
// that pid means something.
#pragma once
#include <cstdint>
#include <string>

namespace edp {

// The host's name as launchers and hostfiles use it: EDP_HOSTNAME when set (containers often
// have a hostname that no hostfile uses), else gethostname(2).
std::string host_name();

// A key naming this host for processes that may share memory: a hash of host_name() and the
// kernel's boot id. Ranks with equal keys are on one host (comm: their shared-memory group;
// layout: their cores).
uint64_t host_key();

// Start time of a live process in clock ticks since boot (/proc/<pid>/stat field 22); 0 when
// there is no such process or it is a zombie (finished; only its parent's wait is missing).
unsigned long long process_start_time(long pid);

// This process's pid namespace (the target of /proc/self/ns/pid), "" when unknown.
std::string pid_namespace();

// The path of this process's program (the target of /proc/self/exe), "" when unknown: a program
// finds what is installed beside it (<prefix>/bin/.. -> <prefix>/share/edp) or starts itself again.
std::string self_executable();

struct ProcessId {
  long pid = 0;
  unsigned long long start_time = 0;
  std::string host, pid_ns;

  static ProcessId self();
  // True only when the process is certainly gone: same host and pid namespace as this process,
  // and its pid is free or names another process now. A process elsewhere is never "gone".
  bool gone() const;
  // Whether this process can check it (same host and pid namespace).
  bool checkable() const;
};

}  // namespace edp
