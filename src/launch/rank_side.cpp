// The ranks' side of edprun (rank_side.h): the per-rank shim and the remote MPS helper.
#include "launch/rank_side.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/text.h"
#include "edp/core/cli.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/core/knobs.h"
#include "edp/comm/communicator.h"
#include "edp/elastic/allowed.h"
#include "edp/elastic/elastic.h"
#include "edp/elastic/events.h"
#include "launch/history.h"
#include "launch/jobdir.h"
#include "launch/mps.h"
#include "launch/launch_plan.h"
#include "launch/supervisor.h"
#include "launch/system.h"

namespace edp::launch {

using ::edp::detail::concat;

namespace {
// EDP_* variables, through the knob registry.
std::string env_or(const char* name) { return knobs::get_string(name); }
int env_int(const char* name) { return static_cast<int>(knobs::get_int(name)); }
}  // namespace

// ---- the per-rank shim ---------------------------------------------------------------------------

namespace {

// The shim's part of a bound rank's binding (rank_exec): the cores mpirun bound it to go to edp in
// EDP_LAUNCH_CPUS, and the process widens to its parent's cores (mpirun's or orted's) before it
// becomes the program.
void hand_binding_to_edp() {
  cpu_set_t mine, all;
  CPU_ZERO(&mine);
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0 || sched_getaffinity(getppid(), sizeof all, &all) != 0) return;
  std::string list;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &mine)) continue;
    if (!list.empty()) list += ',';
    list += std::to_string(c);
  }
  if (list.empty() || setenv("EDP_LAUNCH_CPUS", list.c_str(), 1) != 0) return;
  sched_setaffinity(0, sizeof all, &all);
}

}  // namespace

int rank_exec(int argc, char** argv) {
  int first = 2;
  if (first < argc && std::string(argv[first]) == "--") ++first;
  if (first >= argc) {
    std::fprintf(stderr, "edprun --rank-exec: no program given\n");
    return kUsageError;
  }
  int rank = 0;
  try {
    const knobs::OmpiWorld w = knobs::ompi_world();
    // A rank spawned by an in-place grow: Open MPI numbers it within the spawned group (rank and
    // local rank from 0), the library tells it where that group starts in the grown job. On one
    // host its local rank and size are offset the same way (several hosts: below); and mpirun did
    // not bind it (the cores were planned for the ranks edprun started), so it is placed as
    // unbound: threads = cores / ranks on the host.
    const bool spawned = knobs::is_set("EDP_SPAWN_RANK_BASE");
    const int base = spawned ? static_cast<int>(knobs::get_int("EDP_SPAWN_RANK_BASE")) : 0;
    rank = base + std::max(0, w.rank);
    RankContext c;
    c.rank = rank;
    c.size = base + (w.size > 0 ? w.size : 1);
    c.local_rank = base + std::max(0, w.local_rank);
    c.local_size = base + (w.local_size > 0 ? w.local_size : 1);
    c.ranks_per_gpu = env_int("EDP_RANKS_PER_GPU");
    c.gpu_mode = env_or("EDP_LAUNCH_MODE") == "gpu";
    c.host = host_name();
    if (c.gpu_mode) {
      if (c.host == env_or("EDP_LAUNCH_HOST")) {  // edprun's host: its inventory, no re-discovery
        for (const auto& item : split_list(env_or("EDP_LAUNCH_INVENTORY"), ';')) {
          const auto f = split_list(item, '=');
          if (f.size() < 2) throw Error("EDP_LAUNCH_INVENTORY: malformed entry '" + item + "'");
          GpuInfo g;
          g.index = std::atoi(f[0].c_str());
          g.uuid = f[1];
          c.gpus.push_back(g);
        }
      } else {
        const Discovery d = discover_gpus(knobs::get_bool("EDP_LAUNCH_MIG") ? "mig" : "auto");
        c.gpus = select_gpus(d.gpus, split_list(env_or("EDP_LAUNCH_GPUS")));
        if (c.gpus.empty()) throw Error("host " + c.host + " has no GPU (" + d.source + ") but the job runs in GPU mode");
      }
    }
    c.job_dir = env_or("EDP_LAUNCH_JOB_DIR");
    c.mps = knobs::get_bool("EDP_LAUNCH_MPS");
    c.mps_pipe_directory = env_or("EDP_LAUNCH_MPS_PIPE_DIRECTORY");
    c.mps_thread_percentage = env_int("EDP_LAUNCH_MPS_THREAD_PERCENTAGE");
    c.mps_mem_limit = env_or("EDP_LAUNCH_MPS_MEM_LIMIT");
    // Several hosts (EDP_LAUNCH_HOSTS): the spawned rank's host and its place there follow from
    // the fill rule at the grown size; the library asked Open MPI for exactly that host.
    if (spawned) {
      const auto hosts = knobs::launch_hosts();
      const knobs::HostSlot s = knobs::fill_slot(hosts, c.size, rank);
      if (s.host >= 0) {
        c.local_rank = s.local_rank;
        c.local_size = s.local_size;
        if (hosts[static_cast<size_t>(s.host)].name != c.host)
          std::fprintf(stderr, "edprun --rank-exec: warning: spawned rank %d runs on %s, expected on %s\n", rank,
                       c.host.c_str(), hosts[static_cast<size_t>(s.host)].name.c_str());
      }
    }
    c.bound = !spawned && env_or("EDP_LAUNCH_BIND") == "core";
    c.cores = physical_cores();
    for (const auto& [k, v] : rank_environment(c)) setenv(k.c_str(), v.c_str(), 1);
    if (knobs::is_set("EDP_LAUNCH_THREADS"))
      setenv("EDP_NUM_THREADS", std::to_string(knobs::get_int("EDP_LAUNCH_THREADS")).c_str(), 1);
    // The rank dies with its parent (mpirun on edprun's host, orted elsewhere), so that no rank
    // runs on when they are killed (SIGKILL leaves Open MPI no chance to stop it). Both start
    // their ranks from their main thread, the thread the kernel watches. Survives exec.
    const pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) return 128 + SIGKILL;  // the parent died before prctl took effect
    if (!c.job_dir.empty()) {
      struct stat st{};
      if (stat((c.job_dir + "/ranks").c_str(), &st) == 0) {
        // A spawned rank may take the number of a rank parked by a shrink, which still runs: its
        // file must not replace that rank's (kill_leftover_ranks reads every file here).
        const std::string name = spawned ? concat(rank, ".", getpid()) : std::to_string(rank);
        std::string why;
        if (!files::try_write_atomic(c.job_dir + "/ranks/" + name + ".pid", std::to_string(getpid()) + "\n", &why))
          std::fprintf(stderr, "edprun --rank-exec (rank %d): warning: %s\n", rank, why.c_str());
      }
    }
    // Bound by mpirun: the rank starts on all the cores its parent may use here, and edp binds it
    // back to these once its runtime has started (EDP_LAUNCH_CPUS; edp/core/threads.h says why).
    if (c.bound) hand_binding_to_edp();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edprun --rank-exec (rank %d): %s\n", rank, e.what());
    return kUsageError;
  }
  execvp(argv[first], argv + first);
  std::fprintf(stderr, "edprun (rank %d): cannot run %s: %s\n", rank, argv[first], std::strerror(errno));
  return 127;
}

// ---- MPS daemons on a remote host (run through mpirun, one per host) ----------------------------

int mps_host(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: edprun --mps-host start JOBDIR GPU,GPU... | stop JOBDIR\n");
    return kUsageError;
  }
  const std::string what = argv[2], job = argv[3];
  const std::string control = find_in_path("nvidia-cuda-mps-control");
  try {
    if (what == "start") {
      if (control.empty()) throw Error("nvidia-cuda-mps-control is not on PATH on host " + host_name());
      const Discovery d = discover_gpus("auto");
      const auto gpus = select_gpus(d.gpus, split_list(argc > 4 ? argv[4] : ""));
      mkdir(job.c_str(), 0700);
      MpsController mps(control);
      for (const auto& g : gpus)
        mps.start({0, g.index, g.uuid, mps_pipe_dir(job, g.index), mps_log_dir(job, g.index)});
      mps.release();  // the daemons outlive this helper; `--mps-host stop` ends them
      return 0;
    }
    if (what == "stop") {
      MpsController mps(control.empty() ? "nvidia-cuda-mps-control" : control);
      if (DIR* d = opendir((job + "/mps").c_str())) {
        while (dirent* e = readdir(d)) {
          const std::string n = e->d_name;
          if (n == "." || n == "..") continue;
          const int gpu = std::atoi(n.c_str());
          mps.adopt({0, gpu, "", mps_pipe_dir(job, gpu), mps_log_dir(job, gpu)});
        }
        closedir(d);
      }
      const bool ok = mps.stop_all();
      // edprun's own job directory (its owner record is there: edprun's host, in a rescale that
      // takes this host out of the job) keeps everything but the daemons' directories.
      if (access((job + "/owner.json").c_str(), F_OK) == 0)
        remove_tree(job + "/mps", job);
      else
        remove_tree(job, job.substr(0, job.rfind('/')));
      return ok ? 0 : 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edprun --mps-host %s on %s: %s\n", what.c_str(), host_name().c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "edprun --mps-host: unknown action '%s'\n", what.c_str());
  return kUsageError;
}

}  // namespace edp::launch
