// What one edprun launch owns and how it moves (edprun.cpp runs it): its job directory and the
// plan (prepare_job), the MPS daemons (start_daemons), the next start's plan and daemons after a
// rescale or a lost host (move_to, fit_without). Internal to edprun.
#pragma once
#include <string>
#include <vector>

#include "edp/core/cli.h"
#include "launch/edprun_options.h"
#include "launch/jobdir.h"
#include "launch/launch_plan.h"
#include "launch/mps.h"
#include "launch/system.h"

namespace edp::launch {

// What one launch owns and removes when it ends: its job directory, Open MPI's shared-memory
// directory, the MPS daemons it started (here and on the other hosts).
struct Launch {
  std::string dir;
  std::string parent;   // where dir was made (EDP_JOB_DIR_BASE or $TMPDIR)
  std::string shm_dir;  // Open MPI's shared-memory segments (/dev/shm/edprun.*), "" if not ours
  MpsController* mps = nullptr;
  std::vector<std::string> remote_stop;  // `edprun --mps-host stop` through mpirun
  bool verbose = false;

  // Every exit path ends here (also from the destructor, if an exception got out first).
  void cleanup() {
    if (mps) mps->stop_all();
    mps = nullptr;
    if (!remote_stop.empty()) {
      if (verbose) std::fprintf(stderr, "edprun: stopping MPS daemons on every host: %s\n", shell_join(remote_stop).c_str());
      const RunResult r = run_capture(remote_stop);
      if (r.status != 0)
        std::fprintf(stderr, "edprun: warning: stopping the MPS daemons on the other hosts failed (status %d): %s%s\n",
                     r.status, r.out.c_str(), r.err.c_str());
      remote_stop.clear();
    }
    if (!shm_dir.empty()) {
      if (!remove_tree(shm_dir, "/dev/shm"))
        std::fprintf(stderr, "edprun: warning: could not remove Open MPI's shared-memory directory %s\n", shm_dir.c_str());
      shm_dir.clear();
    }
    if (!dir.empty()) {
      if (!remove_tree(dir, parent)) std::fprintf(stderr, "edprun: warning: could not remove the job directory %s\n", dir.c_str());
      dir.clear();
    }
  }
  // After each mpirun exit, however it ended: ranks it left behind, its session directory and
  // shared-memory segments (a SIGKILLed mpirun removes neither). Returns the ranks killed.
  int after_mpirun() {
    const int killed = kill_leftover_ranks(dir);
    if (!dir.empty()) empty_dir(dir + "/ompi");
    if (!shm_dir.empty()) empty_dir(shm_dir);
    if (!dir.empty()) {
      empty_dir(dir + "/ranks");  // the next start's ranks write their own
      empty_dir(dir + "/stalls");
      std::remove((dir + "/mpirun.pid").c_str());
    }
    return killed;
  }
  ~Launch() { cleanup(); }
};

// The job directory (Open MPI's session and shared-memory directories, records for the next edprun)
// and the plan. A dry run only names them.
void prepare_job(const cli::Options& o, Setup& s);

// The MPS daemons of the plan; 0, or edprun's exit code when they cannot run and MPS is required.
int start_daemons(Setup& s, MpsController& mps, Launch& job);

// The next start at np ranks: a new plan, and the MPS daemons follow a change of GPUs or hosts.
// Throws (leaving the current plan) when np cannot run. `lost`: hosts that cannot be reached,
// whose daemons are not stopped (mpirun would wait for them); lost_all: every host lost so far.
void move_to(Setup& s, MpsController& mps, Launch& job, int np, const std::vector<std::string>& lost,
             const std::vector<std::string>& lost_all);

// The largest size up to `want` that the job's hosts, without those lost, can run (0: none); sets
// the request to those hosts when `apply` (a restart without them).
int fit_without(Setup& s, const std::vector<std::string>& lost, int want, bool apply);

}  // namespace edp::launch
