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
#include "launch/launch_job.h"
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
