// edprun's job directory and what must not outlive a job: the record of the edprun that owns a
// directory (so a later edprun can tell a dead job's directory from a live one), the ranks left
// behind by a killed mpirun, Open MPI's job-private session and shared-memory directories, and
// the size a job committed when it stopped for a rescale.
//
// Layout of a job directory (mkdtemp'd under $TMPDIR as edprun.XXXXXX):
//   owner.json     {"pid", "start_time", "host", "pid_ns", "shm_dir"}: written first
//   ranks/<r>.pid  each rank of this host (the shim), to kill leftovers by pid; a rank spawned by an
//                  in-place grow writes <r>.<pid>.pid (a parked rank may still hold <r>.pid)
//   mpirun.pid     "pid start_time" of the running mpirun
//   ompi/          Open MPI's session directory (--mca orte_tmpdir_base), one job only
//   mps/<gpu>/     MPS daemons' pipe and log directories (mps.h)
//   rescale.json   written by the job's rank 0 before it exits with 75 (EDP_RESCALE_FILE)
//   events.jsonl   the job's membership events, appended by its rank 0 (EDP_EVENTS_FILE, history.h)
// Open MPI's shared-memory segments live in shm_dir (a mkdtemp'd /dev/shm/edprun.XXXXXX, see
// docs/launch.md), outside the job directory because $TMPDIR is usually on disk.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "edp/launch/process.h"

namespace edp::launch {

// Who created a job directory. start_time is the process's start in clock ticks since boot
// (/proc/<pid>/stat field 22): with the pid it names one process even when pids are reused.
struct JobOwner {
  long pid = 0;
  unsigned long long start_time = 0;
  std::string host;    // host_name() of the owner: a directory shared between hosts is left alone
  std::string pid_ns;  // /proc/self/ns/pid of the owner: another container's pids mean nothing here
  std::string shm_dir; // "" when Open MPI's segments were left at their default place
};

JobOwner current_owner(const std::string& shm_dir);
void write_owner(const std::string& job_dir, const JobOwner& o);
// Throws edp::Error when owner.json is missing or malformed, or is not a regular file (a FIFO, a
// link: edprun writes it itself), or is larger than a record (files::kRecordLimit).
JobOwner read_owner(const std::string& job_dir);
// The record's text (where: what errors call it). edp::DataError naming the field.
JobOwner parse_owner(const std::string& text, const std::string& where);
// The owner is this host's and pid namespace's, and that process is gone (or its pid reused).
bool owner_is_dead(const JobOwner& o);

// Kills (SIGKILL) the ranks of this host that wrote <job>/ranks/<r>.pid and are still alive; a
// pid counts only if that process carries EDP_LAUNCH_JOB_DIR=<job> in its environment (reused
// pids are left alone). Returns how many were killed.
int kill_leftover_ranks(const std::string& job_dir);

// Records the running mpirun (pid and start time) in <job>/mpirun.pid.
void write_mpirun_record(const std::string& job_dir, long pid);
// Kills (SIGKILL) the mpirun recorded there if that very process still runs. Returns whether it did.
bool kill_recorded_mpirun(const std::string& job_dir);

// Empties a directory (keeps the directory itself). Returns false if something stayed.
bool empty_dir(const std::string& dir);

// A stale job directory of a dead edprun removed by clean_stale_job_dirs().
struct StaleJob {
  std::string dir;
  long pid = 0;
  int ranks_killed = 0;
  bool mpirun_killed = false;  // its mpirun still ran (it gets SIGTERM when edprun dies; this is the backstop)
  int daemons_stopped = 0;
};
// Scans `parent` for edprun.* directories of this user whose owner is dead (owner_is_dead) and
// removes them: kills their mpirun if it still runs and their leftover ranks, stops their MPS daemons (`quit` through mps_control),
// removes their shared-memory directory (only one of the form edprun makes, /dev/shm/edprun.XXXXXX,
// checked by resolved path and owner) and the directory. Directories without owner.json (being
// created right now, or not edprun's) are left alone. Never throws.
std::vector<StaleJob> clean_stale_job_dirs(const std::string& parent, const std::string& mps_control);

// What rank 0 records in EDP_RESCALE_FILE after committing the checkpoint of a rescale:
// {"workers": W, "global_batch": B, "step": S, "checkpoint": "<path>"}.
struct RescaleRecord {
  int workers = 0;
  int64_t global_batch = 0;
  int64_t step = 0;
  std::string checkpoint;
};
// Throws edp::Error naming the file and the field: missing or unreadable file, malformed JSON,
// a missing field or one of the wrong type, workers < 1, global_batch < 1 or not divisible by
// workers, step < 0, an empty checkpoint path. Unknown fields are ignored (a newer library may
// record more).
RescaleRecord read_rescale_record(const std::string& path);

// What the ranks that timed out in a collective left in EDP_STALL_DIR (<job dir>/stalls), one
// <rank>.json each (comm's stall inspector): the ranks that did not answer and their hosts,
// merged over every record. Records that cannot be read are skipped (a rank may be writing one).
struct StallReport {
  int records = 0;                       // how many ranks reported a stall
  std::vector<int> silent_ranks;         // sorted, unique
  std::vector<std::string> silent_hosts; // in the order first seen
  std::string collective;                // what the first record's rank waited in
};
StallReport read_stall_records(const std::string& dir);

}  // namespace edp::launch
