// edprun's command line (edprun_options.h): its flags, and the launch request they make.
#include "launch/edprun_options.h"

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
#include "launch/rank_side.h"
#include "launch/jobdir.h"
#include "launch/mps.h"
#include "launch/launch_plan.h"
#include "launch/supervisor.h"
#include "launch/system.h"

namespace edp::launch {

using ::edp::detail::concat;

std::string sys_env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}
int sys_env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long r = std::strtol(v, &end, 10);
  if (!end || *end) throw Error(concat(name, "='", v, "' is not an integer"));
  return static_cast<int>(r);
}

cli::Options edprun_options() {
  cli::Options o("edprun",
                  "Runs an MPI program with several ranks per GPU (NVIDIA MPS), or on the CPU cores when there is "
                   "no GPU.\nusage: edprun [options] -- program args...   (exit code: the program's; 2: edprun's own "
                   "error; 128+N: stopped by signal N)");
  o.add("np", "0", "number of ranks (0: every GPU slot; CPU mode: 1 per host, or the hostfile's slots)")
      .int_range(0, 1 << 20)
      .add("ranks-per-gpu", "1", "ranks sharing one GPU (K)")
      .int_range(1, 64)
      .add("gpus", "", "GPUs to use: indices (nvidia-smi numbering) or UUIDs, comma-separated; all; none = CPU mode")
      .add("hostfile", "", "Open MPI hostfile (host slots=N); inside Slurm the allocation is used without one")
      .add("mps", "auto", "auto (MPS when ranks share a GPU, else time-sliced with a warning), on, off")
      .add("mps-thread-percentage", "0", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per rank (0: ceil(200/K), max 100)")
      .int_range(0, 100)
      .add("mps-mem-limit", "", "pinned device memory limit per rank, e.g. 8G (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)")
      .add("mps-pipe-directory", "", "use the MPS daemon already listening there (not started or stopped by edprun)")
      .add("bind-to", "auto", "core (each rank bound to its share of cores), none, auto (core unless oversubscribed)")
      .add("cores-per-host", "0", "physical cores per host to plan with (0: the cores edprun may use here)")
      .int_range(0, 1 << 20)
      .add("gpu-discovery", "auto", "auto (NVML, then nvidia-smi), nvml, nvidia-smi, none")
      .add_flag("mig", "MIG instances as the devices (nvidia-smi -L): one rank per instance, each seeing only its "
                "instance (CUDA_VISIBLE_DEVICES=MIG-...); --gpus then names instances by their index in that list "
                "or their UUID. edprun never changes a GPU's MIG mode or instances")
      .add("mpirun", "mpirun", "the mpirun to use (Open MPI)")
      .add("mpirun-args", "", "extra arguments for mpirun, space-separated (e.g. \"--mca btl ^openib\")")
      .add("kill-grace", "10", "seconds mpirun gets to stop the ranks after a signal before it is killed")
      .int_range(0, 86400)
      .add("term-grace", "0", "seconds mpirun waits between SIGTERM and SIGKILL when it ends the ranks: after a rank's "
           "non-zero exit (a rescale by restart, 75, included), a crash or a signal. Open MPI's own default, 1, is "
           "paid after every non-zero exit even when every rank has ended (odls_base_sigkill_timeout); raise it for "
           "programs that clean up on SIGTERM")
      .int_range(0, 3600)
      .add("control-file", "", "elastic: the job's control file, given to the ranks as EDP_CONTROL_FILE (edprun never "
           "reads it: after exit code 75 it restarts the job at the size the job committed, EDP_RESCALE_FILE; after "
           "78, a stop the file asked for, it ends with 78 and does not restart the job); the ranks also get EDP_SPAWN_WRAPPER (in-place grow) and, on one host, mpirun --oversubscribe")
      .add("max-restarts", "0", "start a job that failed (a crash, a stall: exit 76) again, up to N times, at its "
           "current size (EDP_EVENTS_FILE; it resumes from its checkpoint)")
      .int_range(0, 1000000)
      .add("events-file", "", "where the job's rank 0 appends its membership events (EDP_EVENTS_FILE; default: "
           "<job dir>/events.jsonl); edprun follows the job's size in what is appended after it started")
      .add("status-file", "", "where the job's rank 0 rewrites its measured progress (EDP_STATUS_FILE; "
           "edp-autoscale serve sets it)")
      .add("threads-per-rank", "0", "CPU threads per rank (EDP_NUM_THREADS; 0: the rank's share of its host's cores)")
      .int_range(0, 4096)
      .add("restart-backoff", "5", "seconds before the first restart after a failure, doubling each time")
      .range(0, 86400)
      .add("min-np", "0", "hostfile: the fewest ranks to restart at on the hosts that are left when a host is lost "
           "(its ranks did not answer in a stalled collective); 0: the job's size (a lost host is then fatal unless "
           "the other hosts have the slots)")
      .int_range(0, 1 << 20)
      .add("max-np", "0", "elastic: the largest size a rescale may ask for (0: what the hosts take at the start); "
           "with --reread-hostfile the hostfile must hold the size asked for when the job restarts at it")
      .int_range(0, 1 << 20)
      .add_flag("reread-hostfile", "elastic, hostfile: read the hostfile again before every restart (a rescale or a "
                "failure), so that whoever writes it (edp-autoscale serve --hostfile) chooses the hosts of the next start; "
                "rescales then restart (EDP_RESCALE_MODE=restart), lost hosts stay out; inside a Slurm allocation "
                "mpirun's view of it (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE, ...) follows the file")
      .add_flag("dry-run", "print the plan (ranks, GPUs, cores, environment, daemons, mpirun command) and exit")
      .add_flag("verbose", "print what edprun does")
      .add_flag("allow-run-as-root", "allow running as root (passes --allow-run-as-root to mpirun)")
      .add_flag("oversubscribe", "allow more ranks than cores on a host");
  return o;
}

void fill_request(const cli::Options& o, Setup& s) {
  LaunchRequest& req = s.req;
  std::string& events_file = s.events_file;
  std::string& mps_control = s.mps_control;
  Discovery& disc = s.disc;
  const bool reread = s.reread;
  req.np = static_cast<int>(o.i64("np"));
  req.ranks_per_gpu = static_cast<int>(o.i64("ranks-per-gpu"));
  req.gpus = split_list(o.str("gpus"));
  // CUDA_VISIBLE_DEVICES chosen by the user or the batch system is the default selection.
  if (req.gpus.empty() && !sys_env_or("CUDA_VISIBLE_DEVICES", "").empty()) req.gpus = split_list(sys_env_or("CUDA_VISIBLE_DEVICES", ""));
  req.mps = parse_mps_mode(o.str("mps"));
  req.mps_thread_percentage = static_cast<int>(o.i64("mps-thread-percentage"));
  req.mps_mem_limit = o.str("mps-mem-limit");
  req.mps_pipe_directory = o.str("mps-pipe-directory");
  req.bind = parse_bind_mode(o.str("bind-to"));
  req.oversubscribe = o.flag("oversubscribe");
  req.mpirun = o.str("mpirun");
  req.mpirun_extra = split_list(o.str("mpirun-args"), ' ');
  req.term_grace_s = static_cast<int>(o.i64("term-grace"));
  req.program = o.rest();
  if (!o.str("control-file").empty()) {
    // Absolute, so that every rank finds it whatever its working directory.
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(o.str("control-file"), ec).string();
    req.extra_env.emplace_back("EDP_CONTROL_FILE", ec ? o.str("control-file") : abs);
    req.elastic = true;
    // Read where edprun runs (as the ranks on its host read it); pass it on with -x for others.
    req.elastic_restart_only = knobs::get_string("EDP_RESCALE_MODE") == "restart";
  }
  auto absolute = [](const std::string& p) {
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(p, ec).string();
    return ec ? p : abs;
  };
  events_file = o.str("events-file").empty() ? "" : absolute(o.str("events-file"));
  if (!o.str("status-file").empty()) req.extra_env.emplace_back("EDP_STATUS_FILE", absolute(o.str("status-file")));
  if (o.i64("threads-per-rank") < 0) throw Error("--threads-per-rank must be >= 0");
  if (o.i64("threads-per-rank") > 0)
    req.extra_env.emplace_back("EDP_LAUNCH_THREADS", std::to_string(o.i64("threads-per-rank")));
  req.local_host = host_name();
  req.local_cores = o.i64("cores-per-host") > 0 ? static_cast<int>(o.i64("cores-per-host")) : physical_cores();
  req.self_exe = self_exe_path();
  if (req.elastic && req.self_exe.find(' ') != std::string::npos)
    throw Error("edprun's path '" + req.self_exe + "' contains a space: EDP_SPAWN_WRAPPER (split on spaces) "
                "could not name it; install edprun under a path without spaces to run an elastic job");
  mps_control = find_in_path("nvidia-cuda-mps-control");
  req.mps_control_available = !mps_control.empty();

  const bool root = geteuid() == 0;
  const bool ompi_root_ok = sys_env_or("OMPI_ALLOW_RUN_AS_ROOT", "") == "1" && sys_env_or("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "") == "1";
  req.allow_run_as_root = o.flag("allow-run-as-root") || (root && ompi_root_ok);
  if (root && !req.allow_run_as_root)
    throw Error("refusing to run as root: pass --allow-run-as-root (or EDP_ALLOW_RUN_AS_ROOT=1) if you mean it");

  if (!o.str("hostfile").empty()) {
    req.host_source = HostSource::Hostfile;
    req.hosts = parse_hostfile(o.str("hostfile"));
  } else if (auto slurm = slurm_hosts_from_env()) {
    req.host_source = HostSource::Slurm;
    req.hosts = *slurm;
    req.slurm_ntasks = sys_env_int("SLURM_NTASKS", 0);
    req.slurm_allocation = slurm_allocation_from_env();
  }
  if (o.i64("max-np") < 0) throw Error("--max-np must be >= 0");
  if (reread) {
    if (req.host_source != HostSource::Hostfile) throw Error("--reread-hostfile needs --hostfile");
    if (!req.elastic) throw Error("--reread-hostfile needs --control-file (it is for elastic jobs)");
    // A grow in place would put its ranks where the hostfile of the start said; a restart reads
    // the file again.
    req.elastic_restart_only = true;
    req.extra_env.emplace_back("EDP_RESCALE_MODE", "restart");
  }
  const bool forced_cpu = req.gpus.size() == 1 && req.gpus[0] == "none";
  if (o.flag("mig")) {
    if (forced_cpu) throw Error("--mig with --gpus none: MIG instances are GPU devices; leave one of them out");
    if (req.ranks_per_gpu != 1)
      throw Error("--mig: one rank per MIG instance (--ranks-per-gpu 1); MPS inside MIG instances is not supported");
    req.extra_env.emplace_back("EDP_LAUNCH_MIG", "1");  // the rank shim on other hosts lists instances too
  }
  disc = forced_cpu ? Discovery{{}, "--gpus none"} : discover_gpus(o.flag("mig") ? "mig" : o.str("gpu-discovery"));
  if (o.flag("mig") && disc.gpus.empty()) throw Error("--mig: " + disc.source);
  req.gpu_source = disc.source;

}

}  // namespace edp::launch
