// edprun: plans a launch (plan.h), starts the MPS daemons (mps.h), runs mpirun with a per-rank
// shim that gives each rank its placement, and cleans up on every exit path. Signals are
// blocked from the start and taken synchronously (sigtimedwait), so there is no async handler:
// a SIGINT/SIGTERM/SIGHUP is forwarded to mpirun, and after mpirun is gone (or after the grace
// period, killed) the daemons are stopped and the job directory removed.
//
// What a SIGKILL cannot be allowed to leave behind (docs/launch.md, "Cleanup"): mpirun runs
// with PR_SET_PDEATHSIG = SIGTERM (edprun killed -> mpirun stops the job the way it stops it on
// Ctrl-C), every rank with PR_SET_PDEATHSIG = SIGKILL (its mpirun or orted killed -> the rank
// dies), Open MPI's session directory and shared-memory segments are job-private and removed
// after every mpirun exit, and a job directory whose edprun died is removed by the next edprun.
#include "edp/launch/edprun.h"

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
#include "launch/edprun_options.h"
#include "launch/history.h"
#include "launch/rank_side.h"
#include "launch/jobdir.h"
#include "launch/mps.h"
#include "launch/launch_plan.h"
#include "launch/supervisor.h"
#include "launch/system.h"

// Pulls src/core/cpu_guard.cpp (the start-up instruction-set check) into every program.
extern "C" int edp_cpu_guard_anchor;
[[maybe_unused]] __attribute__((used)) static int* const edp_cpu_guard_ref = &edp_cpu_guard_anchor;

namespace edp::launch {

using ::edp::detail::concat;

namespace {
// The user's own knobs set where edprun runs (EDP_COMM_TIMEOUT, EDP_MIN_STEP_MS, EDP_LOG_LEVEL,
// ...) reach every rank, also on hosts whose orted does not inherit this environment. edprun's
// own variables, those it sets for the job (already in extra_env) and those it derives per rank
// (EDP_NUM_THREADS) are its to set.
void forward_user_knobs(LaunchRequest& req) {
  for (const knobs::Knob& k : knobs::all()) {
    if (k.internal || std::string(k.area) == "launch" || std::string(k.name) == "EDP_NUM_THREADS") continue;
    const char* v = std::getenv(k.name);
    if (!v || !*v) continue;
    const bool set = std::any_of(req.extra_env.begin(), req.extra_env.end(),
                                 [&](const auto& e) { return e.first == k.name; });
    if (!set) req.extra_env.emplace_back(k.name, v);
  }
}
}  // namespace

namespace {

void block_signals(sigset_t& set) {
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

// A termination signal already delivered to edprun (blocked, so pending), or 0.
int pending_stop_signal() {
  sigset_t p;
  sigpending(&p);
  for (int s : {SIGINT, SIGTERM, SIGHUP})
    if (sigismember(&p, s)) {
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, s);
      timespec zero{0, 0};
      sigtimedwait(&one, nullptr, &zero);
      return s;
    }
  return 0;
}

int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1; }

// mpirun dies with edprun: PR_SET_PDEATHSIG survives exec, and the getppid() check closes the race
// of edprun dying between fork and prctl. SIGTERM, not SIGKILL, so that mpirun still stops its
// ranks and removes its session directory as on Ctrl-C (edprun is single-threaded: the "parent
// thread" the kernel watches is edprun's only thread).
pid_t spawn_mpirun(const std::vector<std::string>& argv) {
  const pid_t parent = getpid();
  return fork_exec(argv, "edprun", [parent] {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
  });
}

// ---- the launcher ----------------------------------------------------------------------------------

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

// ---- the launcher, step by step ---------------------------------------------------------------

// The job directory (Open MPI's session and shared-memory directories, records for the next edprun)
// and the plan. A dry run only names them.
void prepare_job(const cli::Options& o, Setup& s) {
  LaunchRequest& req = s.req;
  Plan& plan = s.plan;
  const Discovery& disc = s.disc;
  const bool dry = s.dry, reread = s.reread;
  const std::string& mps_control = s.mps_control;
  std::string& events_file = s.events_file;
  // The job directory's parent: EDP_JOB_DIR_BASE (a directory every host sees, for jobs whose rank 0
  // may run elsewhere), else $TMPDIR.
  const std::string base = knobs::get_string("EDP_JOB_DIR_BASE");
  const std::string tmp = base.empty() ? sys_env_or("TMPDIR", "/tmp") : base;
  // Open MPI's shared-memory segments go to a job-private directory on tmpfs (/dev/shm), its
  // session directory into the job directory; both are then removed after every mpirun exit.
  // Only on one host: the directories would not exist on the others.
  const bool private_ompi = req.host_source == HostSource::Local;
  struct stat shm_st{};
  const bool have_shm = stat("/dev/shm", &shm_st) == 0 && S_ISDIR(shm_st.st_mode) && access("/dev/shm", W_OK) == 0;
  if (dry) {
    req.job_dir = tmp + "/edprun.XXXXXX";
    if (private_ompi && have_shm) req.ompi_shm_dir = "/dev/shm/edprun.XXXXXX";
  } else {
    // Job directories of edprun processes that were killed (SIGKILL skips every cleanup).
    for (const StaleJob& st : clean_stale_job_dirs(tmp, mps_control))
      std::fprintf(stderr,
                   "edprun: removed the job directory of a dead edprun (pid %ld): %s (killed %s%d rank(s) it left "
                   "running, stopped %d MPS daemon(s))\n",
                   st.pid, st.dir.c_str(), st.mpirun_killed ? "its mpirun and " : "", st.ranks_killed,
                   st.daemons_stopped);
    // The job directory holds what the job's ranks and edprun read back (rescale record, events,
    // decoded data): its parent must not let another user swap it.
    files::check_dir(tmp, "the job directory's parent (EDP_JOB_DIR_BASE, else $TMPDIR)");
    std::string templ = tmp + "/edprun.XXXXXX";
    if (!mkdtemp(templ.data())) throw Error("cannot create a job directory under " + tmp + ": " + std::strerror(errno));
    req.job_dir = templ;
    if (private_ompi && have_shm) {
      std::string shm = "/dev/shm/edprun.XXXXXX";
      if (mkdtemp(shm.data())) req.ompi_shm_dir = shm;
    }
  }
  if (private_ompi) req.ompi_session_dir = req.job_dir + "/ompi";
  // Rank 0 records there the size it committed before exiting with 75; edprun restarts at it.
  req.extra_env.emplace_back("EDP_RESCALE_FILE", req.job_dir + "/rescale.json");
  // Rank 0 appends the job's starts and rescales there; edprun follows the job's size with it
  // (history.h). Every job: a restart after a crash reads it too.
  if (events_file.empty()) events_file = req.job_dir + "/events.jsonl";
  req.extra_env.emplace_back("EDP_EVENTS_FILE", events_file);
  // A rank of this host whose collective timed out leaves its stall record there (the silent
  // ranks and their hosts): edprun then ends an mpirun stuck on a lost host, and restarts
  // without that host (--min-np). Ranks on other hosts do not see the directory.
  req.extra_env.emplace_back("EDP_STALL_DIR", req.job_dir + "/stalls");
  // Decoded data for the job's later starts (a restart, the new ranks of a grow), unless the user
  // chose a place (then passed on like every knob of theirs). Ranks on other hosts do not see the
  // directory and decode for themselves.
  if (knobs::get_string("EDP_DATA_CACHE").empty()) req.extra_env.emplace_back("EDP_DATA_CACHE", req.job_dir + "/data");
  // An in-place grow starts its new ranks through the rank shim, which places them like the
  // others (rank_exec, EDP_SPAWN_RANK_BASE). The library splits the command on spaces.
  if (req.elastic) req.extra_env.emplace_back("EDP_SPAWN_WRAPPER", req.self_exe + " --rank-exec --");
  try {
    if (!dry) {
      write_owner(req.job_dir, current_owner(req.ompi_shm_dir));
      mkdir((req.job_dir + "/ranks").c_str(), 0700);
      mkdir((req.job_dir + "/stalls").c_str(), 0700);
      mkdir((req.job_dir + "/data").c_str(), 0700);
      if (private_ompi) mkdir(req.ompi_session_dir.c_str(), 0700);
    }
    // The sizes a rescale may ask for: the ranks refuse any other before acting on it.
    std::vector<int> allowed = allowed_worker_counts(req, disc.gpus);
    if (const int max_np = static_cast<int>(o.i64("max-np")); max_np > 0) {
      if (max_np > elastic::kMaxAllowedWorkers)
        throw Error(concat("--max-np ", max_np, ": at most ", elastic::kMaxAllowedWorkers));
      if (max_np < req.np) throw Error(concat("--max-np ", max_np, " is below -np ", req.np));
      if (reread) {
        // The hosts of a later start are the hostfile's then: every size up to --max-np may be
        // asked for; the restart checks that the hostfile holds it.
        allowed.clear();
        for (int n = 1; n <= max_np; ++n) allowed.push_back(n);
      } else {
        allowed.erase(std::remove_if(allowed.begin(), allowed.end(), [&](int n) { return n > max_np; }), allowed.end());
      }
    }
    req.extra_env.emplace_back("EDP_ALLOWED_WORKERS", elastic::format_allowed_workers(allowed));
    forward_user_knobs(req);
    plan = make_plan(req, disc.gpus);
    plan.notes.push_back("elastic: the job can run at " + elastic::format_allowed_workers(allowed) +
                         " worker(s) (EDP_ALLOWED_WORKERS); after exit code 75 edprun restarts it at the size "
                         "recorded in EDP_RESCALE_FILE");
  } catch (...) {
    if (!dry) {
      remove_tree(req.job_dir, tmp);
      if (!req.ompi_shm_dir.empty()) remove_tree(req.ompi_shm_dir, "/dev/shm");
    }
    throw;
  }
}

// The MPS daemons of the plan; 0, or edprun's exit code when they cannot run and MPS is required.
int start_daemons(Setup& s, MpsController& mps, Launch& job) {
  LaunchRequest& req = s.req;
  Plan& plan = s.plan;
  const Discovery& disc = s.disc;
  // MPS daemons.
  if (!plan.daemons.empty()) {
    try {
      if (!plan.mps_host_start_argv.empty()) {
        job.remote_stop = plan.mps_host_stop_argv;
        const RunResult r = run_capture(plan.mps_host_start_argv);
        if (r.status != 0) throw Error(concat("starting the MPS daemons on every host failed (status ", r.status, "): ", r.out, r.err));
      } else {
        for (const auto& d : plan.daemons) mps.start(d);
      }
    } catch (const std::exception& e) {
      if (req.mps == MpsMode::On) {
        std::fprintf(stderr, "edprun: error: --mps on: %s\n", e.what());
        job.cleanup();
        return kUsageError;
      }
      std::fprintf(stderr, "edprun: warning: MPS could not be started (%s); ranks sharing a GPU run time-sliced\n", e.what());
      mps.stop_all();  // the daemons that did start
      try {
        LaunchRequest off = req;
        off.mps = MpsMode::Off;
        plan = make_plan(off, disc.gpus);
      } catch (const std::exception& e2) {
        std::fprintf(stderr, "edprun: error: %s\n", e2.what());
        job.cleanup();
        return kUsageError;
      }
    }
  }
  return 0;
}

// --reread-hostfile: the hosts the hostfile names now, less those lost so far.
std::vector<HostSpec> current_hosts(const Setup& s, const std::vector<std::string>& lost) {
  std::vector<HostSpec> hs = parse_hostfile(s.hostfile);
  hs.erase(std::remove_if(hs.begin(), hs.end(), [&](const HostSpec& h) {
             return std::find(lost.begin(), lost.end(), h.name) != lost.end();
           }), hs.end());
  if (hs.empty()) throw Error("the hostfile " + s.hostfile + " names no host that is not lost (" + text::join(lost) + ")");
  return hs;
}

// The next start at np ranks: a new plan, and the MPS daemons follow a change of GPUs or hosts.
// Throws (leaving the current plan) when np cannot run. `lost`: hosts that cannot be reached,
// whose daemons are not stopped (mpirun would wait for them); lost_all: every host lost so far.
void move_to(Setup& s, MpsController& mps, Launch& job, int np, const std::vector<std::string>& lost,
             const std::vector<std::string>& lost_all) {
  LaunchRequest& req = s.req;
  Plan& plan = s.plan;
  const Discovery& disc = s.disc;
  const bool reread = s.reread, verbose = s.verbose;
  LaunchRequest next = req;
  next.np = np;
  if (reread) next.hosts = current_hosts(s, lost_all);
  Plan p2 = make_plan(next, disc.gpus);
  const bool remote_now = !plan.mps_host_start_argv.empty(), remote_next = !p2.mps_host_start_argv.empty();
  if (remote_now || remote_next) {
    // Several hosts: per host, the daemons that run now and those the next start needs. A host
    // that leaves the job (or needs other GPUs) has its daemons stopped there, a host that joins
    // gets them started there, by `edprun --mps-host` through mpirun on just those hosts; the
    // hosts that stay keep theirs.
    auto has = [](const std::vector<std::string>& v, const std::string& h) {
      return std::find(v.begin(), v.end(), h) != v.end();
    };
    std::vector<std::string> stop, start, reach;
    if (remote_now)
      for (const auto& h : plan.mps_hosts)
        if (!(remote_next && has(p2.mps_hosts, h) && p2.mps_gpus == plan.mps_gpus) && !has(lost, h)) stop.push_back(h);
    if (remote_next)
      for (const auto& h : p2.mps_hosts)
        if (!(remote_now && has(plan.mps_hosts, h) && p2.mps_gpus == plan.mps_gpus)) start.push_back(h);
    if (!remote_now) mps.stop_all();  // the daemons of one host, started by this edprun
    if (!stop.empty()) {
      const auto argv = mps_host_argv(req, stop, "stop", "");
      if (verbose) std::fprintf(stderr, "edprun: %s\n", shell_join(argv).c_str());
      const RunResult r = run_capture(argv);
      if (r.status != 0)
        std::fprintf(stderr, "edprun: warning: stopping the MPS daemons on host(s) %s failed (status %d): %s%s\n",
                     text::join(stop).c_str(), r.status, r.out.c_str(), r.err.c_str());
    }
    // Until the next start's daemons run, the exit paths stop those of every host involved.
    for (const auto& h : remote_now ? plan.mps_hosts : std::vector<std::string>{})
      if (!has(stop, h) && !has(lost, h)) reach.push_back(h);
    for (const auto& h : start)
      if (!has(reach, h)) reach.push_back(h);
    job.remote_stop = reach.empty() ? std::vector<std::string>{} : mps_host_argv(req, reach, "stop", "");
    if (!start.empty()) {
      const auto argv = mps_host_argv(next, start, "start", p2.mps_gpus);
      if (verbose) std::fprintf(stderr, "edprun: %s\n", shell_join(argv).c_str());
      const RunResult r = run_capture(argv);
      if (r.status != 0)
        throw Error(concat("starting the MPS daemons on host(s) ", text::join(start), " failed (status ", r.status,
                           "): ", r.out, r.err));
    }
    if (!remote_next)
      for (const auto& d : p2.daemons) mps.start(d);
    job.remote_stop = p2.mps_host_stop_argv;
    if (!stop.empty() || !start.empty())
      std::fprintf(stderr, "edprun: MPS daemons stopped on %s, started on %s\n",
                   stop.empty() ? "no host" : text::join(stop).c_str(),
                   start.empty() ? "no host" : text::join(start).c_str());
  } else {
    auto gpus_of = [](const Plan& p) {
      std::vector<std::string> g;
      for (const auto& d : p.daemons) g.push_back(d.gpu_uuid);
      return g;
    };
    if (gpus_of(p2) != gpus_of(plan)) {  // another set of GPUs: the MPS daemons follow
      mps.stop_all();
      for (const auto& d : p2.daemons) mps.start(d);
    }
  }
  req = next;
  plan = std::move(p2);

}

// The largest size up to `want` that the job's hosts, without those lost, can run (0: none); sets
// the request to those hosts when `apply` (a restart without them).
int fit_without(Setup& s, const std::vector<std::string>& lost, int want, bool apply) {
  LaunchRequest next = s.req;
  if (s.reread) next.hosts = current_hosts(s, lost);
  next.hosts.erase(std::remove_if(next.hosts.begin(), next.hosts.end(), [&](const HostSpec& h) {
                     return std::find(lost.begin(), lost.end(), h.name) != lost.end();
                   }), next.hosts.end());
  int fit = 0;
  std::vector<int> allowed;
  if (!next.hosts.empty()) {
    try {
      next.np = want;
      allowed = allowed_worker_counts(next, s.disc.gpus);
    } catch (const std::exception&) {
      next.np = 1;  // `want` itself does not fit: the sizes that do
      try {
        allowed = allowed_worker_counts(next, s.disc.gpus);
      } catch (const std::exception&) {
      }
    }
    for (int n : allowed)
      if (n <= want) fit = std::max(fit, n);
  }
  if (apply) {
    for (auto& [k, v] : next.extra_env)
      if (k == "EDP_ALLOWED_WORKERS" && !s.reread) v = elastic::format_allowed_workers(allowed);
    s.req = next;
  }
  return fit;
}

// How one mpirun ended (after edprun cleaned up behind it).
struct MpirunEnd {
  int code = 0, signal = 0;
  StallReport stall;
  double ended_t = 0;
};

// --reread-hostfile inside a Slurm allocation (edp-autoscale serve --backend slurm): the controller
// resized the allocation (scontrol update) and names its nodes in the hostfile. Open MPI reads the
// allocation from these variables, so they follow the hostfile, as the script scontrol writes after
// a resize (slurm_job_<id>_resize.sh) sets them; srun, which starts mpirun's daemons, asks Slurm.
void follow_slurm_allocation(const Setup& s) {
  if (!s.reread || sys_env_or("SLURM_JOB_ID", "").empty()) return;
  std::string nodes, tasks;
  for (const HostSpec& h : s.req.hosts) {
    nodes += (nodes.empty() ? "" : ",") + h.name;
    tasks += (tasks.empty() ? "" : ",") + std::to_string(std::max(1, h.slots));
  }
  const std::string n = std::to_string(s.req.hosts.size());
  using Var = std::pair<const char*, std::string>;
  for (const auto& [k, v] : {Var{"SLURM_JOB_NODELIST", nodes}, Var{"SLURM_NODELIST", nodes}, Var{"SLURM_JOB_NUM_NODES", n},
                             Var{"SLURM_NNODES", n}, Var{"SLURM_TASKS_PER_NODE", tasks}})
    setenv(k, v.c_str(), 1);
  unsetenv("SLURM_NTASKS");  // the allocation's, not this start's
  unsetenv("SLURM_NPROCS");
  if (s.verbose) std::fprintf(stderr, "edprun: Slurm allocation as the hostfile says: %s, tasks %s\n", nodes.c_str(), tasks.c_str());
}

// Runs mpirun once and waits for it: forwards a stop signal (and kills mpirun after the grace
// period), follows the job's events, and kills an mpirun stuck after a stall the ranks reported.
MpirunEnd run_mpirun(Setup& s, Launch& job, JobHistory& history, sigset_t& sigs, double grace) {
  follow_slurm_allocation(s);
  const Plan& plan = s.plan;
  const std::string stall_dir = s.req.job_dir + "/stalls";
  if (s.verbose) std::fprintf(stderr, "edprun: %s\n", shell_join(plan.mpirun_argv).c_str());
  std::remove((s.req.job_dir + "/rescale.json").c_str());  // only this start's rank 0 may tell edprun a size
  const pid_t child = spawn_mpirun(plan.mpirun_argv);
  write_mpirun_record(job.dir, child);  // for the next edprun, should this one be SIGKILLed
  int got_signal = 0, code = 0;
  bool killed = false;
  auto deadline = std::chrono::steady_clock::time_point::max();
  auto next_poll = std::chrono::steady_clock::now();
  // A stall the ranks reported: when mpirun outlives it by --kill-grace, it is stuck on a host
  // it cannot reach (Open MPI 4.1 waits for every daemon to confirm the abort) and is killed.
  StallReport stall;
  auto stall_deadline = std::chrono::steady_clock::time_point::max();
  bool stall_killed = false;
  for (;;) {
    timespec tick{0, 200 * 1000 * 1000};
    const int s = sigtimedwait(&sigs, nullptr, &tick);
    if (s == SIGINT || s == SIGTERM || s == SIGHUP) {
      if (!got_signal) {
        got_signal = s;
        deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                          std::chrono::duration<double>(grace));
        std::fprintf(stderr, "edprun: got %s, stopping the job\n", strsignal(s));
      }
      kill(child, s);
    }
    int st = 0;
    const pid_t w = waitpid(child, &st, WNOHANG);
    if (w == child) {
      code = status_code(st);
      if (WIFSIGNALED(st) && !got_signal)
        std::fprintf(stderr, "edprun: mpirun was killed by signal %d (%s); removing what it left behind\n", WTERMSIG(st),
                     strsignal(WTERMSIG(st)));
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_poll) {  // a stat every 0.5 s; the file is read only when it grew
      history.poll();
      next_poll = now + std::chrono::milliseconds(500);
      if (stall.records == 0) {
        stall = read_stall_records(stall_dir);
        if (stall.records > 0) {
          stall_deadline = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                     std::chrono::duration<double>(grace));
          std::fprintf(stderr, "edprun: the job stalled in %s; %s\n", stall.collective.c_str(),
                       stall.silent_ranks.empty() ? "every rank answered"
                                                  : concat("rank(s) ", text::join(stall.silent_ranks), " on host(s) ",
                                                           text::join(stall.silent_hosts), " did not answer").c_str());
        }
      }
    }
    if (!stall_killed && now > stall_deadline) {
      std::fprintf(stderr, "edprun: mpirun has not ended %.0f s after the stall (it waits for host(s) it cannot "
                   "reach: %s); killing it\n", grace, text::join(stall.silent_hosts).c_str());
      kill(child, SIGKILL);
      stall_killed = true;
    }
    if (!killed && now > deadline) {
      std::fprintf(stderr, "edprun: mpirun did not stop within %.0f s; killing it\n", grace);
      kill(child, SIGKILL);
      killed = true;
    }
  }
  MpirunEnd end;
  end.ended_t = elastic::wall_time();
  history.poll();  // what rank 0 wrote last
  if (stall.records == 0) stall = read_stall_records(stall_dir);
  if (stall_killed) code = comm::kStallExitCode;  // the ranks aborted with it; mpirun could not say so
  const int leftovers = job.after_mpirun();
  if (leftovers > 0) std::fprintf(stderr, "edprun: killed %d rank(s) left behind by mpirun\n", leftovers);
  end.code = code;
  end.signal = got_signal;
  end.stall = stall;
  return end;
}

// What the ended run tells the supervisor: the rescale record (exit 75), the lost hosts (a stall).
RunEnd run_end(const Setup& s, const MpirunEnd& m, const JobHistory& history, RescaleRecord& rec) {
  RunEnd e;
  e.code = m.code;
  e.workers = history.workers();
  e.np = s.plan.np;
  if (m.code == elastic::kRescaleExitCode) {
    const std::string rescale_file = s.req.job_dir + "/rescale.json";
    try {
      rec = read_rescale_record(rescale_file);
      e.rescale_record = true;
      e.rescale_workers = rec.workers;
    } catch (const std::exception& x) {
      e.rescale_error = x.what();
    }
    std::remove(rescale_file.c_str());
  }
  if (m.code == comm::kStallExitCode)
    for (const auto& h : m.stall.silent_hosts)
      if (std::any_of(s.req.hosts.begin(), s.req.hosts.end(), [&](const HostSpec& x) { return x.name == h; }))
        e.lost_hosts.push_back(h);
  e.silent_ranks = m.stall.silent_ranks;
  return e;
}

// The back-off before a restart; a stop signal meanwhile is returned (else 0).
int wait_backoff(sigset_t& sigs, double backoff) {
  timespec wait{static_cast<time_t>(backoff), static_cast<long>((backoff - std::floor(backoff)) * 1e9)};
  const int sig = sigtimedwait(&sigs, nullptr, &wait);
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
    std::fprintf(stderr, "edprun: got %s while waiting to restart; stopping\n", strsignal(sig));
    return sig;
  }
  return 0;
}

// Carries out one step of the supervisor; returns the next one when it cannot. `rescaled`: the
// step was a rescale that is now done (the caller records it).
Step carry_out(Setup& s, MpsController& mps, Launch& job, Supervisor& sup, const Step& step, const RunEnd& e,
               int history_workers) {
  try {
    if (step.kind == Step::Rescale) {
      move_to(s, mps, job, step.np, {}, sup.lost_hosts());
    } else if (!step.without.empty()) {
      const LaunchRequest saved = s.req;
      fit_without(s, sup.lost_hosts(), history_workers, true);
      try {
        move_to(s, mps, job, step.np, step.without, sup.lost_hosts());
      } catch (...) {
        s.req = saved;
        throw;
      }
    } else if (step.np > 0 && (step.np != s.plan.np || s.reread)) {
      move_to(s, mps, job, step.np, {}, sup.lost_hosts());
    }
  } catch (const std::exception& x) {
    return sup.cannot(step, e, x.what());
  }
  return step;
}

// The restart/rescale loop: run mpirun, ask the supervisor what next, carry it out.
int supervise(const cli::Options& o, Setup& s, MpsController& mps, Launch& job, sigset_t& sigs) {
  // The job's size as its events tell it (in-place rescales change it without edprun), its
  // rescales and restarts; printed when the job ends.
  JobHistory history(s.plan.np, s.events_file);
  history.skip_existing();  // a file given with --events-file may hold an earlier run's events
  auto finish = [&](int code) {
    history.poll();
    std::fputs(history.summary(code).c_str(), stderr);
    job.cleanup();
    return code;
  };
  Supervisor sup({static_cast<int>(o.i64("max-restarts")), o.f64("restart-backoff"), static_cast<int>(o.i64("min-np")),
                  s.req.host_source == HostSource::Hostfile},
                 [&](const std::vector<std::string>& lost, int want) { return fit_without(s, lost, want, false); });
  const double grace = static_cast<double>(o.i64("kill-grace"));
  for (;;) {
    MpirunEnd m;
    try {
      m = run_mpirun(s, job, history, sigs, grace);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "edprun: error: %s\n", x.what());
      job.cleanup();
      return kUsageError;
    }
    if (m.signal) return finish(128 + m.signal);
    if (s.verbose) std::fprintf(stderr, "edprun: mpirun exited with %d\n", m.code);
    RescaleRecord rec;
    const RunEnd e = run_end(s, m, history, rec);
    Step step = sup.after(e);
    for (int tries = 0; tries < 3; ++tries) {  // a step that cannot be carried out becomes another
      const Step done = step.kind == Step::Finish ? step : carry_out(s, mps, job, sup, step, e, history.workers());
      const bool same = done.kind == step.kind && done.np == step.np && done.say == step.say;
      step = done;
      if (same) break;
    }
    for (const auto& line : step.say) std::fprintf(stderr, "edprun: %s\n", line.c_str());
    if (step.kind == Step::Finish) return finish(step.code);
    if (step.kind == Step::Rescale) {
      const int from = history.workers();
      history.restart_rescale(from, rec.workers, rec.global_batch, rec.step, m.ended_t);
      std::fprintf(stderr, "edprun: rescale %d: %d -> %d rank(s) (global batch %lld, committed at step %lld: %s)\n",
                   history.rescales(), from, s.plan.np, static_cast<long long>(rec.global_batch),
                   static_cast<long long>(rec.step), rec.checkpoint.c_str());
      continue;
    }
    history.restart_failure(e.code, step.stall, s.plan.np, m.ended_t);
    if (!step.without.empty()) {
      std::string left;
      for (const auto& h : s.req.hosts) left += (left.empty() ? std::string() : std::string(",")) + h.name;
      std::fprintf(stderr, "edprun: host(s) %s lost (rank(s) %s did not answer); restart %d of %d on %s at %d rank(s) "
                   "in %.0f s\n", text::join(step.without).c_str(), text::join(e.silent_ranks).c_str(), step.restart,
                   static_cast<int>(o.i64("max-restarts")), left.c_str(), s.plan.np, step.wait_s);
    } else {
      std::fprintf(stderr, "edprun: %s; restart %d of %d at %d rank(s) in %.0f s\n", step.failure.c_str(), step.restart,
                   static_cast<int>(o.i64("max-restarts")), s.plan.np, step.wait_s);
    }
    if (const int sig = wait_backoff(sigs, step.wait_s)) return finish(128 + sig);
  }
}

int launcher(int argc, char** argv) {
  // Open MPI spells it -np; the options only know --long ones.
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i)
    if (args[i] == "-np" || args[i] == "-n") args[i] = "--np";
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cli::Options o = edprun_options();
  o.parse(static_cast<int>(cargs.size()), cargs.data());
  Setup s;
  s.dry = o.flag("dry-run");
  s.verbose = o.flag("verbose");
  s.reread = o.flag("reread-hostfile");
  s.hostfile = o.str("hostfile");
  // From here on a Ctrl-C waits (pending) until edprun can clean up what it created.
  sigset_t sigs;
  block_signals(sigs);
  try {
    knobs::check_environment();  // a malformed EDP_* value fails now, not at its first use in the job
    fill_request(o, s);
    prepare_job(o, s);
    if (s.dry) {
      std::fputs(format_plan(s.plan).c_str(), stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edprun: error: %s\n", e.what());
    return kUsageError;
  }
  // Declared before the Launch, so that it outlives the Launch's cleanup on every path.
  MpsController mps(s.mps_control.empty() ? "nvidia-cuda-mps-control" : s.mps_control, s.verbose);
  Launch job;
  job.dir = s.req.job_dir;
  job.parent = job.dir.substr(0, job.dir.rfind('/'));  // the base it was made in (setup_job_dir)
  job.shm_dir = s.req.ompi_shm_dir;
  job.verbose = s.verbose;
  job.mps = &mps;
  for (const auto& n : s.plan.notes)
    if (n.rfind("warning:", 0) == 0) std::fprintf(stderr, "edprun: %s\n", n.c_str());
  if (s.verbose) std::fputs(format_plan(s.plan).c_str(), stderr);
  if (const int rc = start_daemons(s, mps, job)) return rc;
  if (const int sig = pending_stop_signal()) {
    job.cleanup();
    return 128 + sig;
  }
  if (find_in_path(s.req.mpirun).empty()) {
    std::fprintf(stderr, "edprun: error: %s not found on PATH (install Open MPI: apt-get install openmpi-bin)\n",
                 s.req.mpirun.c_str());
    job.cleanup();
    return kUsageError;
  }
  return supervise(o, s, mps, job, sigs);
}

}  // namespace

int edprun_main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--rank-exec") return rank_exec(argc, argv);
  if (argc >= 2 && std::string(argv[1]) == "--mps-host") return mps_host(argc, argv);
  try {
    return launcher(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edprun: error: %s\n", e.what());
    return kUsageError;
  }
}

}  // namespace edp::launch
