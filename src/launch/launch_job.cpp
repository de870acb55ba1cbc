// What one edprun launch owns and how it moves (launch_job.h).
#include "launch/launch_job.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/text.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/core/knobs.h"
#include "edp/elastic/allowed.h"
#include "launch/rank_side.h"

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

namespace {
// --reread-hostfile: the hosts the hostfile names now, less those lost so far.
std::vector<HostSpec> current_hosts(const Setup& s, const std::vector<std::string>& lost) {
  std::vector<HostSpec> hs = parse_hostfile(s.hostfile);
  hs.erase(std::remove_if(hs.begin(), hs.end(), [&](const HostSpec& h) {
             return std::find(lost.begin(), lost.end(), h.name) != lost.end();
           }), hs.end());
  if (hs.empty()) throw Error("the hostfile " + s.hostfile + " names no host that is not lost (" + text::join(lost) + ")");
  return hs;
}
}  // namespace

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

}  // namespace edp::launch
