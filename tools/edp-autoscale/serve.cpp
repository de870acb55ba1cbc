// edp-autoscale serve | submit | status | cancel | keeper: the live autoscaler's command line and
// process plumbing (docs/autoscaler.md §8). The controller itself — job table, slots, planning,
// the state transitions — is the library's (src/autoscale/controller.h); this file gives it its
// processes and files (FileRunner) and runs it. Past 600 lines on purpose: the five subcommands
// share the root directory's layout and its lock, which stay in one file.
//
// Everything lives under one root directory, so that the controller can be killed and started
// again without losing a job, and so that submit/status/cancel need no connection to it:
//
//   ROOT/serve.lock      flock()ed by the running controller (one per root)
//   ROOT/serve.json      the controller's settings (slots, kind, policy) for submit's checks
//   ROOT/next_id         the last job number given out (under ROOT/submit.lock)
//   ROOT/inbox/          submit drops <id>.json, cancel drops cancel-<id>; serve takes them
//   ROOT/jobs.json       the job table (rewritten atomically after every change)
//   ROOT/decisions.jsonl one line per planning round: trigger, plan, each job's action and reason
//   ROOT/jobs/<id>/      spec.json, log (edprun's and the job's output), control.json (the size
//                        the controller asks for), status.json (EDP_STATUS_FILE: measured step
//                        times), events.jsonl (EDP_EVENTS_FILE: starts and rescales), keeper.json,
//                        edprun.pid, exit.json, hostfile (serve --hostfile: the job's hosts and
//                        slots; edprun reads it again at every restart)
//
// A job runs as: keeper (`edp-autoscale keeper <id>`, a process of its own session and name, which
// outlives the controller and is not killed with it by name) -> edprun -> mpirun -> ranks. The
// keeper waits for edprun and writes exit.json with its exit status. A controller started again
// finds running jobs by their keeper's pid and start time; a job whose keeper is gone is followed
// through its edprun's (edprun.pid), and judged by its status file once both are gone.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "autoscale/controller.h"
#include "core/json_fields.h"
#include "autoscale/job_files.h"
#include "autoscale/slurm.h"
#include "commands.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/elastic/elastic.h"
#include "edp/launch/placement.h"
#include "edp/core/process.h"
#include "edp/launch/process.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace edp;
using namespace edp::autoscale;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int s) { g_stop = s; }

double now_s() { return elastic::wall_time(); }

bool alive(long pid, unsigned long long st) { return pid > 0 && st != 0 && launch::process_start_time(pid) == st; }

std::string self_exe() {
  const std::string exe = self_executable();
  return exe.empty() ? "edp-autoscale" : exe;
}

std::string default_edprun() {
  const fs::path exe = self_exe();
  for (const fs::path& p : {exe.parent_path() / "edprun", exe.parent_path().parent_path() / "edprun" / "edprun"})
    if (fs::exists(p)) return p.string();
  return "edprun";
}

// ---- the processes and files of the jobs --------------------------------------------------------

// Keepers: a job's processes run on this host under a supervisor process of their own.
class FileRunner final : public JobDirRunner {
 public:
  FileRunner(fs::path root, std::string edprun, std::vector<std::string> edprun_args)
      : JobDirRunner(std::move(root), std::move(edprun), std::move(edprun_args)), self_(self_exe()) {}

  void start(ManagedJob& j, const std::vector<std::string>& launch) override;
  void signal(const ManagedJob& j, int sig) override {
    // edprun's pid, as its keeper recorded it; edprun forwards the signal to mpirun and cleans up.
    const auto [pid, st] = edprun_of(j);
    if (alive(pid, st)) ::kill(static_cast<pid_t>(pid), sig);
  }
  std::optional<ExitRecord> exit_record(const ManagedJob& j) override { return exit_file(j); }
  bool keeper_alive(const ManagedJob& j) override { return alive(j.keeper_pid, j.keeper_start); }
  bool edprun_alive(const ManagedJob& j) override {
    const auto [pid, st] = edprun_of(j);
    return alive(pid, st);
  }

 private:
  std::pair<long, unsigned long long> edprun_of(const ManagedJob& j) const {
    std::string text;
    try {
      text = files::read_file_if_exists(dir(j) + "/edprun.pid", files::kRecordLimit, files::Links::Refuse).value_or("");
    } catch (const DataError&) {
    }
    std::istringstream f(text);
    long pid = 0;
    unsigned long long st = 0;
    if (!(f >> pid >> st)) return {0, 0};
    return {pid, st};
  }
  std::string self_;
};

void FileRunner::start(ManagedJob& j, const std::vector<std::string>& launch) {
  const fs::path d = dir(j);
  files::make_dir(d.string(), "job directory");
  fs::remove(d / "exit.json");
  fs::remove(d / "edprun.pid");
  const std::vector<std::string> argv = edprun_command(j, launch);
  // The keeper: this program again, as `edp-autoscale keeper <id> ...`, in a session of its own (a
  // signal to the controller's terminal or process group does not reach the job), with no
  // descriptor of the controller's (the serve lock), its output the job's log.
  std::vector<std::string> keeper = {"edp-autoscale", "keeper", j.id, "--dir", d.string(), "--cwd",
                                     j.spec.cwd.empty() ? root().string() : j.spec.cwd, "--"};
  keeper.insert(keeper.end(), argv.begin(), argv.end());
  const std::string logp = (d / "log").string();
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setsid();
    for (int s : {SIGTERM, SIGINT, SIGHUP}) ::signal(s, SIG_IGN);  // the keeper outlives the controller
    for (const auto& [k, v] : j.spec.env) setenv(k.c_str(), v.c_str(), 1);
    // Across hosts rank 0 may run on another host than edprun and writes the rescale record into
    // edprun's job directory: put it in this job's directory, which the hosts see (rank 0 writes
    // the status file here too).
    if (std::find(launch.begin(), launch.end(), "--hostfile") != launch.end())
      setenv("EDP_JOB_DIR_BASE", d.c_str(), 1);
    int logfd = -1;
    try {
      logfd = files::open_append(logp);  // never through a link planted as the log
    } catch (const std::exception& e) {
      std::fprintf(stderr, "edp-autoscale: %s\n", e.what());
      _exit(127);
    }
    const int nul = ::open("/dev/null", O_RDONLY);
    dup2(nul, 0);
    dup2(logfd, 1);
    dup2(logfd, 2);
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    std::vector<char*> cargv;
    for (auto& a : keeper) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(self_.c_str(), cargv.data());
    std::fprintf(stderr, "edp-autoscale: cannot run the keeper %s: %s\n", self_.c_str(), std::strerror(errno));
    _exit(127);
  }
  j.keeper_pid = pid;
  // The child's start time: read until /proc shows it (it exists from fork on).
  for (int i = 0; i < 100 && (j.keeper_start = launch::process_start_time(pid)) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  files::write_atomic((d / "keeper.json").string(), json{{"pid", pid}, {"start_time", j.keeper_start}}.dump() + "\n");
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  const std::string on = j.gpu_type.empty() ? "" : " on GPU type " + j.gpu_type;
  std::fprintf(stderr, "edp-autoscale serve: job %s started%s: %s\n", j.id.c_str(), on.c_str(), cmd.c_str());
}

// ---- the serve loop ---------------------------------------------------------------------------

struct ServeOptions {
  fs::path root;
  int slots = 0;
  std::string backend = "local", kind = "auto", hostfile, edprun;
  SlurmOptions slurm;
  std::vector<launch::HostSlots> hosts;
  std::vector<std::string> edprun_args;
  double tick_s = 0.05;
  bool exit_when_idle = false, quiet = false;
  ControllerConfig cfg;
};

class Serve {
 public:
  explicit Serve(ServeOptions o) : o_(std::move(o)) {}
  int run();

 private:
  void log(const std::string& s) const {
    if (!o_.quiet) std::fprintf(stderr, "edp-autoscale serve: %s\n", s.c_str());
  }
  bool take_inbox(Controller& c);
  std::unique_ptr<Resources> resources() const;
  void save(const Controller& c) const { files::write_atomic((o_.root / "jobs.json").string(), table_json(c.jobs())); }
  ServeOptions o_;
};

std::unique_ptr<Resources> Serve::resources() const {
  if (!o_.hosts.empty()) {
    std::vector<HostfileSlot> hs;
    for (const auto& h : o_.hosts) hs.push_back({h.name, h.slots});
    return hostfile_slots(hs, o_.hostfile);
  }
  if (o_.kind == "mig") return mig_slots(o_.slots);
  if (o_.kind != "gpu") return cpu_slots(o_.slots);
  // Each GPU's type from nvidia-smi: jobs then start on GPUs of one type, the one the plan chose.
  std::string why;
  std::vector<std::string> types = this_host_gpu_types(o_.slots, &why);
  if (types.empty()) {
    log("the GPUs' types are not known (" + why + "): every GPU is taken as alike");
    return gpu_slots(o_.slots);
  }
  return gpu_slots(std::move(types));
}

// Specs and cancels dropped by submit and cancel. Returns whether the table changed.
bool Serve::take_inbox(Controller& c) {
  const fs::path inbox = o_.root / "inbox";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(inbox))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  // Specs before cancels: a cancel may name a job submitted in the same instant.
  std::sort(files.begin(), files.end(), [](const fs::path& x, const fs::path& y) {
    const bool cx = x.filename().string().rfind("cancel-", 0) == 0, cy = y.filename().string().rfind("cancel-", 0) == 0;
    return cx != cy ? cy : x < y;
  });
  bool changed = false;
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    if (name.rfind("cancel-", 0) == 0) {
      c.cancel(name.substr(7));
      changed = true;
    } else if (f.extension() == ".json" && !c.has(f.stem().string())) {  // taken before a crash: skip
      try {
        const JobSpec spec = parse_job_spec(files::read_file(f.string(), files::kRecordLimit), f.string());
        const std::string id = f.stem().string();
        files::make_dir((o_.root / "jobs" / id).string(), "job directory");
        files::write_atomic((o_.root / "jobs" / id / "spec.json").string(), job_spec_json(spec) + "\n");
        c.submit(id, spec);
        changed = true;
      } catch (const std::exception& e) {
        log(std::string("refused ") + f.string() + ": " + e.what());
      }
    }
    if (changed) save(c);  // before the file goes: a crash in between leaves the job, not the file
    fs::remove(f);
  }
  return changed;
}

int Serve::run() {
  // The root holds what the controller and its jobs read back: refused when another user could
  // write into it.
  files::make_dir(o_.root.string(), "the serve root (--root)");
  files::make_dir((o_.root / "inbox").string(), "the serve root's inbox");
  files::make_dir((o_.root / "jobs").string(), "the serve root's jobs");
  const auto lock = files::FileLock::try_acquire((o_.root / "serve.lock").string());
  if (!lock)
    throw Error("another edp-autoscale serve runs on " + o_.root.string() + " (" + (o_.root / "serve.lock").string() +
                " is locked)");
  if (o_.kind == "auto") o_.kind = std::system("nvidia-smi -L >/dev/null 2>&1") == 0 && o_.backend == "local" ? "gpu" : "cpu";
  // The backend: this host or a hostfile (slots handed out here, keepers run the jobs), or Slurm
  // (the slots and the jobs are Slurm's; one object is both).
  std::unique_ptr<Resources> own_res;
  std::unique_ptr<FileRunner> own_runner;
  std::unique_ptr<SlurmClient> client;
  std::unique_ptr<SlurmBackend> slurm;
  if (o_.backend == "slurm") {
    client = slurm_client();
    slurm = std::make_unique<SlurmBackend>(*client, o_.slurm, o_.root, o_.edprun, o_.edprun_args, now_s,
                                           [this](const std::string& s) { log(s); });
  } else {
    own_res = resources();
    own_runner = std::make_unique<FileRunner>(o_.root, o_.edprun, o_.edprun_args);
  }
  Resources& res = slurm ? static_cast<Resources&>(*slurm) : *own_res;
  // A speed for a type no GPU has is a typo: refused here; under Slurm, whose nodes come and go, said.
  std::vector<std::string> type_names;  // the partition's under Slurm, not only those with nodes free now
  if (slurm)
    type_names = slurm->gpu_types();
  else
    for (const SlotType& t : res.types()) type_names.push_back(t.name);
  for (const auto& [name, speed] : o_.cfg.gpu_speeds) {
    std::string known;
    bool found = false;
    for (const std::string& t : type_names) {
      known += (known.empty() ? "" : ", ") + t;
      found = found || t == name;
    }
    if (found) continue;
    const std::string why = "--gpu-speeds: no GPU here is of type '" + name + "' (" +
                            (known.empty() ? std::string("the GPUs are of one type, or their types are not known") : "types: " + known) + ")";
    if (!slurm) throw DataError(why);
    log(why + "; the speed is unused until nodes of that type are typed");
  }
  JobRunner& runner = slurm ? static_cast<JobRunner&>(*slurm) : *own_runner;
  const std::string decisions = (o_.root / "decisions.jsonl").string();
  Controller c(o_.cfg, res, runner, now_s, [this](const std::string& s) { log(s); },
               [&](const json& line) {
                 try {
                   files::append(decisions, line.dump() + "\n");
                 } catch (const Error& e) {
                   log(std::string("cannot record the decision: ") + e.what());
                 }
               });
  const auto table = files::read_file_if_exists((o_.root / "jobs.json").string(), files::kTableLimit);
  // Refused (running jobs that do not fit these resources): before serve.json, which keeps the
  // settings of the controller that started them.
  const int adopted = c.adopt(table ? parse_table(*table, (o_.root / "jobs.json").string()) : std::vector<ManagedJob>{});
  files::write_atomic((o_.root / "serve.json").string(),
                      json{{"pid", getpid()}, {"slots", res.limit()}, {"kind", o_.kind}, {"policy", o_.cfg.policy},
                           {"max_ranks_per_gpu", o_.cfg.max_ranks_per_gpu}, {"hostfile", o_.hostfile},
                           {"backend", o_.backend}, {"partition", slurm ? slurm->partition() : ""},
                           {"started_t", now_s()}}.dump() + "\n");
  if (adopted) log("re-adopted " + std::to_string(adopted) + " job(s) from " + (o_.root / "jobs.json").string());
  log(res.describe() + ", policy " + o_.cfg.policy + ", root " + o_.root.string());
  ::signal(SIGINT, on_signal);
  ::signal(SIGTERM, on_signal);
  ::signal(SIGHUP, on_signal);
  std::string why = "";
  while (!g_stop) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }  // keepers that ended (their exit.json says how the job did)
    const bool submitted = take_inbox(c);
    if (c.tick() || submitted) save(c);
    if (o_.exit_when_idle && c.idle() && fs::is_empty(o_.root / "inbox")) {
      why = "every job has ended (--exit-when-idle)";
      break;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.tick_s));
  }
  if (g_stop) why = std::string("got ") + strsignal(g_stop);
  save(c);
  const auto running = std::count_if(c.jobs().begin(), c.jobs().end(), [](const ManagedJob& j) { return j.running(); });
  log("stopping: " + why +
      (running ? "; " + std::to_string(running) + " job(s) keep running and are re-adopted by the next serve on this root"
               : std::string()));
  return 0;
}

// ---- submit / status / cancel ---------------------------------------------------------------------

std::vector<ManagedJob> load_table(const fs::path& root) {
  const auto text = files::read_file_if_exists((root / "jobs.json").string(), files::kTableLimit);
  return text ? parse_table(*text, (root / "jobs.json").string()) : std::vector<ManagedJob>{};
}

void need_root(const fs::path& root) {
  if (!fs::is_directory(root))
    throw DataError("--root " + root.string() + ": no such directory (the root of an edp-autoscale serve)");
}

int submit(const fs::path& root, const std::string& spec_path) {
  std::string text;
  if (spec_path == "-") {
    // Standard input, with the limit of a spec file.
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
      text.append(buf, n);
      if (text.size() > files::kRecordLimit)
        throw DataError("stdin: more than the " + std::to_string(files::kRecordLimit) + " bytes a job spec may have");
    }
  } else {
    // A regular file only (a FIFO or /dev/zero would block or never end), at most a record's size.
    const auto t = files::read_file_if_exists(spec_path, files::kRecordLimit);
    if (!t) throw DataError(spec_path + ": no such file");
    text = *t;
  }
  JobSpec s = parse_job_spec(text, spec_path);
  if (s.cwd.empty()) s.cwd = fs::current_path().string();
  std::optional<std::string> cfg;
  try {
    cfg = files::read_file_if_exists((root / "serve.json").string(), files::kRecordLimit);
  } catch (const DataError&) {
  }
  if (cfg) {
    const json c = json_fields::try_parse(*cfg).value_or(json());
    if (c.is_object()) {
      const int cap = c.value("slots", 0) * (c.value("kind", "") == "gpu" ? std::max(1, c.value("max_ranks_per_gpu", 1)) : 1);  // mig: one rank each
      if (cap > 0 && s.min_workers > cap)
        throw DataError(spec_path + ": field 'min_workers': " + std::to_string(s.min_workers) +
                        " worker(s) can never run on this cluster (" + std::to_string(c.value("slots", 0)) + " slot(s))");
    }
  }
  files::make_dir((root / "inbox").string(), "the serve root's inbox");
  const files::FileLock lock = files::FileLock::acquire((root / "submit.lock").string());
  long n = 0;
  if (const auto t = files::read_file_if_exists((root / "next_id").string(), files::kRecordLimit, files::Links::Refuse))
    n = std::atol(t->c_str());
  char id[32];
  std::snprintf(id, sizeof id, "j%04ld", ++n);
  files::write_atomic((root / "next_id").string(), std::to_string(n) + "\n");
  // write_atomic writes it whole under a dot name (which serve skips) and renames it into place.
  files::write_atomic((root / "inbox" / (std::string(id) + ".json")).string(), job_spec_json(s) + "\n");
  std::printf("%s\n", id);
  return 0;
}

int cancel(const fs::path& root, const std::string& id) {
  need_root(root);
  bool known = fs::exists(root / "inbox" / (id + ".json"));
  for (const ManagedJob& j : load_table(root))
    if (j.id == id) {
      if (finished(j.state)) throw DataError("job " + id + " has already ended (" + phase_name(j.state) + ")");
      known = true;
    }
  if (!known) throw DataError("no job " + id + " under " + root.string());
  files::write_atomic((root / "inbox" / ("cancel-" + id)).string(), "\n");
  std::printf("cancel requested for %s\n", id.c_str());
  return 0;
}

// What the table's last column says of a job.
std::string note_of(const ManagedJob& j) {
  if (j.running() && j.preempt_requested) return "stopping (preempted)";
  const std::string to = std::to_string(j.target_workers) + "x" + std::to_string(j.target_batch);
  if (j.running() && j.awaiting)
    return "grow to " + to + " waits in Slurm's queue" +
           (j.sched_grow.id.empty() ? std::string() : " (job " + j.sched_grow.id + " " + j.sched_grow.state +
                                                           (j.sched_grow.reason.empty() ? "" : ", " + j.sched_grow.reason) + ")");
  if (j.running() && j.moving) return "stopping to start again at " + to + " in a new allocation";
  if (j.running() && j.target_workers > 0) return "rescaling to " + to;
  if (j.running() && j.sched.state == "PENDING") return "waits in Slurm's queue (" + j.sched.reason + ")";
  if (j.running() && j.keeper_lost) return "keeper lost; followed through its edprun";
  std::string n;
  if (finished(j.state) && j.state != JobPhase::Cancelled) {
    n = "exit " + std::to_string(j.exit_code);
    char buf[160];
    if (j.metrics.have) {
      auto add = [&](const char* k, double v, const char* f) {
        if (v < 0) return;
        std::snprintf(buf, sizeof buf, f, v);
        n += std::string(", ") + k + " " + buf;
      };
      add("test_acc", j.metrics.test_acc, "%.4f");
      add("final_loss", j.metrics.final_loss, "%.4f");
      add("samples/s", j.metrics.samples_per_s, "%.1f");
    }
  }
  if (!j.error.empty()) n += (n.empty() ? "" : "; ") + j.error;
  return n;
}

int status(const fs::path& root, bool as_json) {
  need_root(root);
  std::vector<ManagedJob> jobs = load_table(root);
  std::vector<std::pair<std::string, JobSpec>> submitted;  // in the inbox, not taken yet
  if (fs::exists(root / "inbox"))
    for (const auto& e : fs::directory_iterator(root / "inbox"))
      if (e.path().extension() == ".json" && e.path().filename().string()[0] != '.') try {
          submitted.emplace_back(e.path().stem().string(),
                                 parse_job_spec(files::read_file(e.path().string(), files::kRecordLimit), e.path().string()));
        } catch (const std::exception&) {
        }
  const bool serving = files::FileLock::held_elsewhere((root / "serve.lock").string());
  if (as_json) {
    json arr = json::array();
    for (const ManagedJob& j : jobs) {
      json x = job_json(j);
      const StepTimeModel m = fit_measured(j.measured);
      x["fit"] = {{"a", m.a}, {"c", m.c}, {"s0", m.s0}, {"s1", m.s1}, {"points", j.measured.size()}};
      x["progress"] = j.samples_total > 0 ? static_cast<double>(j.samples_done) / static_cast<double>(j.samples_total) : 0.0;
      arr.push_back(x);
    }
    for (const auto& [id, spec] : submitted)
      arr.push_back({{"id", id}, {"spec", json::parse(job_spec_json(spec))}, {"state", "submitted"}});
    std::printf("%s\n", json{{"root", root.string()}, {"serving", serving}, {"jobs", arr}}.dump(2).c_str());
    return 0;
  }
  std::printf("%s: controller %s\n", root.string().c_str(), serving ? "running" : "not running");
  // Jobs of Slurm (serve --backend slurm): their Slurm job id and state beside edp's.
  const bool slurm = std::any_of(jobs.begin(), jobs.end(), [](const ManagedJob& j) { return !j.sched.id.empty(); });
  if (slurm) std::printf("%-8s %-12s ", "slurm", "slurm state");
  // Jobs on GPUs of known types: the type each runs (or last ran) on.
  size_t typed = 0;
  for (const ManagedJob& j : jobs) typed = std::max(typed, j.gpu_type.size());
  const int type_w = static_cast<int>(std::max<size_t>(8, typed));
  if (typed) std::printf("%-*s ", type_w, "gpu type");
  std::printf("%-6s %-16s %-10s %7s %5s %7s %10s %8s %8s %8s %8s  %s\n", "job", "name", "state", "workers", "k",
              "batch", "samples/s", "progress", "restarts", "rescales", "preempts", "note");
  for (const ManagedJob& j : jobs) {
    if (slurm)
      std::printf("%-8s %-12s ", j.sched.id.empty() ? "-" : j.sched.id.c_str(),
                  j.sched.state.empty() ? "-" : j.sched.state.substr(0, 12).c_str());
    if (typed) std::printf("%-*s ", type_w, j.gpu_type.empty() ? "-" : j.gpu_type.c_str());
    const bool run = j.running();
    char prog[16] = "-";
    if (j.samples_total > 0) std::snprintf(prog, sizeof prog, "%.0f%%", 100.0 * j.samples_done / j.samples_total);
    char sps[24] = "-";
    if (run && j.samples_per_s > 0) std::snprintf(sps, sizeof sps, "%.0f", j.samples_per_s);
    std::printf("%-6s %-16s %-10s %7s %5s %7s %10s %8s %8d %8d %8d  %s\n", j.id.c_str(), j.spec.name.substr(0, 16).c_str(),
                phase_name(j.state), run ? std::to_string(j.workers).c_str() : "-",
                run ? std::to_string(j.ranks_per_slot).c_str() : "-", run ? std::to_string(j.batch).c_str() : "-", sps,
                prog, j.restarts, j.rescales, j.preemptions, note_of(j).c_str());
  }
  for (const auto& [id, spec] : submitted) {
    if (slurm) std::printf("%-8s %-12s ", "-", "-");
    if (typed) std::printf("%-*s ", type_w, "-");
    std::printf("%-6s %-16s %-10s\n", id.c_str(), spec.name.substr(0, 16).c_str(), "submitted");
  }
  return 0;
}

}  // namespace

namespace edp::autoscale_tool {

// serve --backend slurm: Slurm gives the slots (nodes) and runs the jobs.
static int cmd_serve_slurm(const cli::Options& o, ServeOptions& s) {
  if (o.given("slots")) throw DataError("--slots: with --backend slurm the slots are the nodes Slurm gives (leave it out)");
  if (!s.hostfile.empty()) throw DataError("--hostfile: with --backend slurm the hosts are the nodes Slurm gives (leave it out)");
  if (s.kind == "gpu" || s.kind == "mig")
    throw DataError("--backend slurm: jobs run on CPU nodes for now (--slot-kind cpu); GPU nodes under Slurm are not built");
  s.kind = "cpu";
  s.slurm.partition = o.str("partition");
  s.slurm.grow = o.str("slurm-grow");
  s.slurm.poll_s = o.f64("slurm-poll");
  std::stringstream ss(o.str("slurm-args"));
  for (std::string a; ss >> a;) s.slurm.extra_args.push_back(a);
  return Serve(s).run();
}

// --gpu-speeds TYPE=SPEED,...: each a GPU type's name and a positive speed, no name twice.
static std::map<std::string, double> parse_gpu_speeds(const std::string& text) {
  std::map<std::string, double> out;
  if (text.empty()) return out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    double speed = 0;
    size_t used = 0;
    try {
      if (eq != std::string::npos) speed = std::stod(item.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (name.empty() || eq == std::string::npos || used == 0 || used != item.size() - eq - 1 || !std::isfinite(speed) ||
        !(speed > 0))
      throw DataError("--gpu-speeds: '" + item + "' is not TYPE=SPEED with a speed > 0 (e.g. a100-sxm4-40gb=1,h100-80gb-hbm3=2.2)");
    if (!out.emplace(name, speed).second) throw DataError("--gpu-speeds: type '" + name + "' is given twice");
  }
  return out;
}

int cmd_serve(int argc, char** argv) {
  cli::Options o = options_for(
      "serve", "The live controller (docs/autoscaler.md, section 8): starts, measures and rescales elastic jobs "
               "through edprun; runs until SIGTERM/SIGINT (the jobs keep running and are re-adopted).",
      {"root", "backend", "slots", "hostfile", "partition", "slurm-grow", "slurm-poll", "slurm-args", "slot-kind",
       "policy", "replan", "hysteresis", "pause", "start-cost", "rescale-timeout", "preempt-grace", "max-ranks-per-gpu",
       "settle", "warmup-steps", "slot-memory-mib", "gpu-speeds", "tick", "edprun", "edprun-args", "exit-when-idle",
       "quiet"});
  if (const int rc = parse(o, argc, argv); rc >= 0) return rc;
  if (o.str("root").empty()) throw DataError("--root DIR is needed");
  ServeOptions s;
  s.root = fs::absolute(o.str("root"));
  s.slots = o.given("slots") ? static_cast<int>(o.i64("slots")) : 0;
  s.kind = o.str("slot-kind");
  ControllerConfig& c = s.cfg;
  c.policy = o.str("policy").empty() ? "goodput" : o.str("policy");
  try {
    parse_policy(c.policy, PolicyScope::Live);
  } catch (const Error& e) {
    throw DataError(std::string("--policy: ") + e.what());
  }
  c.replan_s = o.f64("replan");
  c.hysteresis = o.f64("hysteresis");
  c.pause_s = o.given("pause") ? o.f64("pause") : -1;
  c.start_s = o.f64("start-cost");
  c.rescale_timeout_s = o.f64("rescale-timeout");
  c.preempt_grace_s = o.f64("preempt-grace");
  c.max_ranks_per_gpu = static_cast<int>(o.i64("max-ranks-per-gpu"));
  c.warmup_steps = static_cast<int>(o.i64("warmup-steps"));
  c.slot_memory_bytes = o.i64("slot-memory-mib") << 20;
  c.settle_s = o.f64("settle");
  c.gpu_speeds = parse_gpu_speeds(o.str("gpu-speeds"));
  s.tick_s = o.f64("tick");
  s.hostfile = o.str("hostfile");
  s.edprun = o.str("edprun").empty() ? default_edprun() : o.str("edprun");
  s.exit_when_idle = o.flag("exit-when-idle");
  s.quiet = o.flag("quiet");
  std::stringstream ss(o.str("edprun-args"));
  for (std::string a; ss >> a;) s.edprun_args.push_back(a);
  s.backend = o.str("backend") == "auto" ? (s.hostfile.empty() ? "local" : "hostfile") : o.str("backend");
  if (s.backend == "slurm") return cmd_serve_slurm(o, s);
  // (--slot-kind auto is decided at the start, where a speed for a type no GPU has is refused.)
  if (!c.gpu_speeds.empty() && (s.kind == "cpu" || s.kind == "mig"))
    throw DataError("--gpu-speeds is for GPUs of several types (--slot-kind gpu or auto, or --backend slurm), not --slot-kind " + s.kind);
  for (const char* k : {"partition", "slurm-grow", "slurm-poll", "slurm-args"})
    if (o.given(k)) throw DataError(std::string("--") + k + " is for --backend slurm");
  if (s.backend == "hostfile" && s.hostfile.empty()) throw DataError("--backend hostfile needs --hostfile FILE");
  if (s.backend == "local" && !s.hostfile.empty()) throw DataError("--hostfile is for --backend hostfile (or auto)");
  if (!s.hostfile.empty()) {
    s.hostfile = fs::absolute(s.hostfile).string();
    if (s.kind == "gpu" || s.kind == "mig")
      throw DataError("--hostfile: jobs on several hosts run on CPU slots for now (--slot-kind cpu)");
    s.kind = "cpu";
    s.hosts = launch::read_hostfile(s.hostfile);
    int sum = 0;
    for (const auto& h : s.hosts) {
      if (h.slots < 1) throw DataError(s.hostfile + ": host " + h.name + " has no slots=N (the controller hands out slots)");
      sum += h.slots;
    }
    if (s.slots > 0 && s.slots != sum)
      throw DataError("--slots " + std::to_string(s.slots) + " contradicts the hostfile's " + std::to_string(sum) +
                      " slot(s); leave --slots out");
    s.slots = sum;
  } else if (s.slots < 1) {
    throw DataError("--slots N (or --hostfile FILE) is needed");
  }
  return Serve(s).run();
}

int cmd_submit(int argc, char** argv) {
  cli::Options o = options_for("submit", "Hands a job spec (JSON) to the controller under --root; prints the job's id.",
                               {"root"});
  o.add_positional("spec", "the job spec (JSON; '-' for stdin)");
  if (const int rc = parse(o, argc, argv); rc >= 0) return rc;
  if (o.str("root").empty()) throw DataError("--root DIR is needed");
  return submit(fs::absolute(o.str("root")), o.positional("spec"));
}

int cmd_status(int argc, char** argv) {
  cli::Options o = options_for("status", "The controller's jobs under --root; a finished job's exit code and final metrics.",
                               {"root", "json"});
  if (const int rc = parse(o, argc, argv); rc >= 0) return rc;
  if (o.str("root").empty()) throw DataError("--root DIR is needed");
  return status(fs::absolute(o.str("root")), o.flag("json"));
}

int cmd_cancel(int argc, char** argv) {
  cli::Options o = options_for("cancel", "Stops a job (queued: never starts; running: SIGTERM to its edprun, or scancel of its "
                                         "Slurm job).", {"root"});
  o.add_positional("id", "the job to cancel");
  if (const int rc = parse(o, argc, argv); rc >= 0) return rc;
  if (o.str("root").empty()) throw DataError("--root DIR is needed");
  return cancel(fs::absolute(o.str("root")), o.positional("id"));
}

// The per-job supervisor serve starts: `edp-autoscale keeper ID --dir DIR --cwd DIR -- edprun ...`.
// Its own name (so that killing the controller by name leaves it), its own session; it starts
// edprun, records edprun's pid and start time, waits, and records the exit status.
int cmd_keeper(int argc, char** argv) {
  if (argc < 7 || std::string(argv[2]) != "--dir" || std::string(argv[4]) != "--cwd" || std::string(argv[6]) != "--" ||
      argc < 8) {
    std::fprintf(stderr, "edp-autoscale keeper: started by edp-autoscale serve only (ID --dir DIR --cwd DIR -- COMMAND)\n");
    return 2;
  }
  const std::string id = argv[1], dir = argv[3], cwd = argv[5];
  prctl(PR_SET_NAME, ("keeper " + id).substr(0, 15).c_str());
  for (int s : {SIGTERM, SIGINT, SIGHUP}) ::signal(s, SIG_IGN);
  const pid_t child = fork();
  if (child == 0) {
    for (int s : {SIGTERM, SIGINT, SIGHUP}) ::signal(s, SIG_DFL);
    if (chdir(cwd.c_str()) != 0) {
      std::fprintf(stderr, "edp-autoscale: cannot enter %s: %s\n", cwd.c_str(), std::strerror(errno));
      _exit(127);
    }
    execvp(argv[7], argv + 7);
    std::fprintf(stderr, "edp-autoscale: cannot run %s: %s\n", argv[7], std::strerror(errno));
    _exit(127);
  }
  std::string why;
  if (child > 0 && !files::try_write_atomic(dir + "/edprun.pid",
                                            std::to_string(child) + " " + std::to_string(launch::process_start_time(child)) + "\n",
                                            &why))
    std::fprintf(stderr, "edp-autoscale keeper %s: cannot record edprun's pid: %s\n", id.c_str(), why.c_str());
  int status = 0;
  while (child > 0 && waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = child < 0 ? 127 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (!files::try_write_atomic(dir + "/exit.json", json{{"code", code}, {"t", now_s()}}.dump() + "\n", &why)) {
    // The controller then judges the job by its status file.
    std::fprintf(stderr, "edp-autoscale keeper %s: cannot record the exit status %d: %s\n", id.c_str(), code, why.c_str());
    return 1;
  }
  return 0;
}

}  // namespace edp::autoscale_tool
