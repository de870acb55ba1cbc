// edp-autoscale serve | submit | status | cancel: the live autoscaler (docs/autoscaler.md §8).
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
// A job runs as: keeper (a process of its own session, which outlives the controller) -> edprun
// -> mpirun -> ranks. The keeper waits for edprun and writes exit.json with its exit status; a
// controller started again finds running jobs by their keeper's pid and start time.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
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

#include "edp/autoscale/live.h"
#include "edp/autoscale/simulator.h"
#include "edp/core/error.h"
#include "edp/elastic/elastic.h"
#include "edp/elastic/events.h"
#include "edp/launch/placement.h"
#include "edp/launch/process.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace edp;
using namespace edp::autoscale;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

double now_s() { return elastic::wall_time(); }

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes a temporary file and renames it over `p`: readers see the old or the new whole file.
void write_atomic(const fs::path& p, const std::string& text) {
  const std::string tmp = p.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw Error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), p.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + p.string() + ": " + std::strerror(errno));
  }
}

bool alive(long pid, unsigned long long st) {
  return pid > 0 && st != 0 && launch::process_start_time(pid) == st;
}

// A file's modification time and size as last seen: the controller polls every tick and reads a
// job's status and events only when they changed (they are rewritten atomically or appended).
struct FileStamp {
  bool seen = false;
  fs::file_time_type mtime{};
  uintmax_t size = 0;
};
bool changed(const fs::path& p, FileStamp& s) {
  std::error_code ec;
  FileStamp now{true, fs::last_write_time(p, ec), 0};
  if (!ec) now.size = fs::file_size(p, ec);
  if (ec) now = FileStamp{true, {}, 0};  // missing: unchanged until it appears
  if (s.seen && now.mtime == s.mtime && now.size == s.size) return false;
  s = now;
  return true;
}

// An exclusive lock on a file, held as long as the descriptor is open (and not inherited: every
// child closes it, see start_keeper).
int lock_file(const fs::path& p, bool wait) {
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open " + p.string() + ": " + std::strerror(errno));
  if (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// ---- the job table ------------------------------------------------------------------------------

struct Job {
  std::string id;
  JobSpec spec;
  std::string state = "queued";  // queued | running | done | failed | cancelled
  double submit_t = 0, start_t = 0, end_t = 0;
  int workers = 0, ranks_per_slot = 1;
  int64_t batch = 0;
  std::vector<int> gpus;  // GPU slots held (gpu kind)
  // serve --hostfile: the slots the job runs on per host (in its hostfile's order), and those of a
  // rescale asked for and not landed yet (its hostfile already says them; a shrink keeps holding
  // what it leaves until it lands, a grow holds what it takes from the moment it asks).
  std::vector<std::pair<std::string, int>> hosts, next_hosts;
  // A rescale asked for (control.json written) and not seen in the events yet.
  int target_workers = 0;
  int64_t target_batch = 0;
  double target_t = 0;
  long keeper_pid = 0;
  unsigned long long keeper_start = 0;
  int starts = 0, rescales = 0, restarts = 0;
  size_t events_seen = 0;
  int64_t samples_done = 0, samples_total = 0;
  double samples_per_s = 0;  // measured at its current size (0: not yet)
  std::vector<Measured> measured;
  std::vector<double> pauses;
  bool cancel_requested = false, preempt_requested = false;
  // A preemption: when the stop was asked for through the control file, and whether the job then
  // got SIGTERM for not stopping within --preempt-grace.
  double preempt_t = 0;
  bool preempt_signalled = false;
  int preemptions = 0;
  int exit_code = 0;
  // In memory only: what poll() last read of status.json and events.jsonl.
  FileStamp status_stamp, events_stamp;
  std::vector<elastic::MembershipEvent> events;
  std::string error;
};

json measured_json(const Measured& m) {
  return {{"workers", m.workers}, {"ranks_per_slot", m.ranks_per_slot}, {"batch", m.batch},
          {"steps", m.steps},     {"step_s", m.step_s},                 {"comm_s", m.comm_s}};
}

json job_json(const Job& j) {
  json ms = json::array();
  for (const Measured& m : j.measured) ms.push_back(measured_json(m));
  return {{"id", j.id},
          {"spec", json::parse(job_spec_json(j.spec))},
          {"state", j.state},
          {"submit_t", j.submit_t},
          {"start_t", j.start_t},
          {"end_t", j.end_t},
          {"workers", j.workers},
          {"ranks_per_slot", j.ranks_per_slot},
          {"batch", j.batch},
          {"gpus", j.gpus},
          {"hosts", j.hosts},
          {"next_hosts", j.next_hosts},
          {"target_workers", j.target_workers},
          {"target_batch", j.target_batch},
          {"target_t", j.target_t},
          {"keeper_pid", j.keeper_pid},
          {"keeper_start", j.keeper_start},
          {"starts", j.starts},
          {"rescales", j.rescales},
          {"restarts", j.restarts},
          {"events_seen", j.events_seen},
          {"samples_done", j.samples_done},
          {"samples_total", j.samples_total},
          {"samples_per_s", j.samples_per_s},
          {"measured", ms},
          {"pauses", j.pauses},
          {"cancel_requested", j.cancel_requested},
          {"preempt_requested", j.preempt_requested},
          {"preempt_t", j.preempt_t},
          {"preempt_signalled", j.preempt_signalled},
          {"preemptions", j.preemptions},
          {"exit_code", j.exit_code},
          {"error", j.error}};
}

Job job_from_json(const json& x) {
  Job j;
  j.id = x.at("id").get<std::string>();
  j.spec = parse_job_spec(x.at("spec").dump(), "job " + j.id);
  j.state = x.at("state").get<std::string>();
  j.submit_t = x.value("submit_t", 0.0);
  j.start_t = x.value("start_t", 0.0);
  j.end_t = x.value("end_t", 0.0);
  j.workers = x.value("workers", 0);
  j.ranks_per_slot = x.value("ranks_per_slot", 1);
  j.batch = x.value("batch", int64_t{0});
  j.gpus = x.value("gpus", std::vector<int>{});
  j.hosts = x.value("hosts", std::vector<std::pair<std::string, int>>{});
  j.next_hosts = x.value("next_hosts", std::vector<std::pair<std::string, int>>{});
  j.target_workers = x.value("target_workers", 0);
  j.target_batch = x.value("target_batch", int64_t{0});
  j.target_t = x.value("target_t", 0.0);
  j.keeper_pid = x.value("keeper_pid", 0L);
  j.keeper_start = x.value("keeper_start", 0ULL);
  j.starts = x.value("starts", 0);
  j.rescales = x.value("rescales", 0);
  j.restarts = x.value("restarts", 0);
  j.events_seen = x.value("events_seen", size_t{0});
  j.samples_done = x.value("samples_done", int64_t{0});
  j.samples_total = x.value("samples_total", int64_t{0});
  j.samples_per_s = x.value("samples_per_s", 0.0);
  for (const auto& m : x.value("measured", json::array()))
    j.measured.push_back({m.value("workers", 0), m.value("ranks_per_slot", 1), m.value("batch", int64_t{0}),
                          m.value("steps", int64_t{0}), m.value("step_s", 0.0), m.value("comm_s", 0.0)});
  j.pauses = x.value("pauses", std::vector<double>{});
  j.cancel_requested = x.value("cancel_requested", false);
  j.preempt_requested = x.value("preempt_requested", false);
  j.preempt_t = x.value("preempt_t", 0.0);
  j.preempt_signalled = x.value("preempt_signalled", false);
  j.preemptions = x.value("preemptions", 0);
  j.exit_code = x.value("exit_code", 0);
  j.error = x.value("error", "");
  return j;
}

std::vector<Job> load_table(const fs::path& root) {
  std::vector<Job> jobs;
  const fs::path p = root / "jobs.json";
  if (!fs::exists(p)) return jobs;
  const json t = json::parse(read_file(p), nullptr, false);
  if (t.is_discarded() || !t.is_object() || !t.contains("jobs"))
    throw Error(p.string() + " is damaged (not the job table edp-autoscale writes); move it away to start afresh");
  for (const auto& x : t["jobs"]) jobs.push_back(job_from_json(x));
  return jobs;
}

void save_table(const fs::path& root, const std::vector<Job>& jobs) {
  json arr = json::array();
  for (const Job& j : jobs) arr.push_back(job_json(j));
  write_atomic(root / "jobs.json", json{{"version", 1}, {"jobs", arr}}.dump(1) + "\n");
}

bool finished(const Job& j) { return j.state == "done" || j.state == "failed" || j.state == "cancelled"; }

// ---- the controller -----------------------------------------------------------------------------

struct ServeOptions {
  fs::path root;
  int slots = 0;
  std::string kind = "auto";
  std::string policy = "goodput";
  double replan_s = 30, tick_s = 0.05, hysteresis = 0.15, pause_s = -1, start_s = 3, rescale_timeout_s = 120,
         preempt_grace_s = 60;
  int max_ranks_per_gpu = 1;
  std::string hostfile;                            // --hostfile: CPU hosts and their slots
  std::vector<launch::HostSlots> hosts;            // what it lists
  std::string edprun;
  std::vector<std::string> edprun_args;
  bool exit_when_idle = false, quiet = false;
};

class Controller {
 public:
  explicit Controller(ServeOptions o) : o_(std::move(o)) {}
  int run();

 private:
  void log(const std::string& s) {
    if (!o_.quiet) std::fprintf(stderr, "edp-autoscale serve: %s\n", s.c_str());
  }
  fs::path dir(const Job& j) const { return o_.root / "jobs" / j.id; }
  void take_inbox();
  void poll(Job& j);
  void finish(Job& j, const json& exit);
  void replan(const std::string& trigger);
  void start(Job& j, int workers, int k, int64_t batch);
  void request(Job& j, int workers, int64_t batch);
  void preempt(Job& j, const std::string& reason);
  void signal_job(Job& j, int sig);
  int slots_held() const;
  // --hostfile: the slots of each host held by running jobs other than `except`.
  std::map<std::string, int> host_use(const Job* except) const;
  // --hostfile: `workers` slots for j, keeping the hosts it has (rank 0's first), then taking
  // the hosts with the most free slots; written to its hostfile.
  std::vector<std::pair<std::string, int>> assign_hosts(const Job& j, int workers) const;
  // Re-adopted running jobs must fit this controller's hosts: the same mode (hostfile or not),
  // every host they hold listed, no host holding more than its slots. Throws naming the job and
  // host otherwise (a changed hostfile would else hand out slots that are taken).
  void check_adopted_hosts() const;
  void write_hostfile(const Job& j, const std::vector<std::pair<std::string, int>>& hs) const;
  json hosts_json() const;
  void save() { save_table(o_.root, jobs_); }

  ServeOptions o_;
  std::vector<Job> jobs_;
  bool gpu_ = false;
  double last_plan_ = 0;
  bool dirty_ = false;  // something happened that calls for a new plan
  std::string trigger_;
};

int Controller::slots_held() const {
  int held = 0;
  for (const Job& j : jobs_)
    if (j.state == "running") {
      const int w = std::max(j.workers, j.target_workers);  // a grow in flight holds its new slots
      held += (w + j.ranks_per_slot - 1) / j.ranks_per_slot;
    }
  return held;
}

void Controller::check_adopted_hosts() const {
  const std::string again = "; start serve again with the hostfile the jobs were started with, or stop them first";
  for (const Job& j : jobs_) {
    if (j.state != "running") continue;
    if (o_.hosts.empty() && !j.hosts.empty())
      throw Error("running job " + j.id + " holds slots on " + std::to_string(j.hosts.size()) + " host(s) (" +
                  j.hosts.front().first + " first) under --hostfile, and this serve has none" + again);
    if (!o_.hosts.empty() && j.hosts.empty())
      throw Error("running job " + j.id + " was started without --hostfile and holds no hosts of " + o_.hostfile + again);
  }
  if (o_.hosts.empty()) return;
  for (const auto& [host, used] : host_use(nullptr)) {
    const auto h = std::find_if(o_.hosts.begin(), o_.hosts.end(), [&](const auto& x) { return x.name == host; });
    const auto lists = [&](const auto& hs) {
      return std::any_of(hs.begin(), hs.end(), [&](const auto& x) { return x.first == host; });
    };
    std::string who;
    for (const Job& j : jobs_)
      if (j.state == "running" && (lists(j.hosts) || lists(j.next_hosts))) who += (who.empty() ? "" : ", ") + j.id;
    if (h == o_.hosts.end())
      throw Error("running job(s) " + who + " hold " + std::to_string(used) + " slot(s) on host " + host + ", which " +
                  o_.hostfile + " does not list" + again);
    if (used > h->slots)
      throw Error("running job(s) " + who + " hold " + std::to_string(used) + " slot(s) on host " + host + ", and " +
                  o_.hostfile + " gives it " + std::to_string(h->slots) + again);
  }
}

std::map<std::string, int> Controller::host_use(const Job* except) const {
  std::map<std::string, int> use;
  for (const Job& j : jobs_) {
    if (&j == except || j.state != "running") continue;
    std::map<std::string, int> mine;
    for (const auto& [h, n] : j.hosts) mine[h] = std::max(mine[h], n);
    for (const auto& [h, n] : j.next_hosts) mine[h] = std::max(mine[h], n);
    for (const auto& [h, n] : mine) use[h] += n;
  }
  return use;
}

std::vector<std::pair<std::string, int>> Controller::assign_hosts(const Job& j, int workers) const {
  const std::map<std::string, int> use = host_use(&j);
  std::map<std::string, int> cap;
  for (const auto& h : o_.hosts) cap[h.name] = h.slots;
  auto free_on = [&](const std::string& h) { return cap[h] - (use.count(h) ? use.at(h) : 0); };
  // Its own hosts first, in order (its own slots count as free for it: host_use leaves the job
  // out; a shrink keeps the first ones), then the others, the freest first (fewer hosts per job),
  // the hostfile's order on ties.
  std::vector<std::string> order;
  if (j.state == "running")
    for (const auto& held : j.hosts) order.push_back(held.first);
  std::vector<std::string> others;
  for (const auto& h : o_.hosts)
    if (std::find(order.begin(), order.end(), h.name) == order.end()) others.push_back(h.name);
  std::stable_sort(others.begin(), others.end(),
                   [&](const std::string& x, const std::string& y) { return free_on(x) > free_on(y); });
  order.insert(order.end(), others.begin(), others.end());
  std::vector<std::pair<std::string, int>> out;
  int left = workers;
  for (const std::string& h : order) {
    const int take = std::min(left, free_on(h));
    if (take > 0) {
      out.emplace_back(h, take);
      left -= take;
    }
  }
  if (left > 0)
    throw Error("job " + j.id + ": " + std::to_string(workers) + " worker(s) do not fit the hosts' free slots");
  return out;
}

void Controller::write_hostfile(const Job& j, const std::vector<std::pair<std::string, int>>& hs) const {
  std::string text = "# edp-autoscale serve: job " + j.id + "'s slots (edprun reads this again at every restart)\n";
  for (const auto& [h, n] : hs) text += h + " slots=" + std::to_string(n) + "\n";
  write_atomic(dir(j) / "hostfile", text);
}

json Controller::hosts_json() const {
  json out = json::object();
  const std::map<std::string, int> use = host_use(nullptr);
  for (const auto& h : o_.hosts) out[h.name] = {{"used", use.count(h.name) ? use.at(h.name) : 0}, {"slots", h.slots}};
  return out;
}

void Controller::take_inbox() {
  const fs::path inbox = o_.root / "inbox";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(inbox))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
  // Specs before cancels: a cancel may name a job submitted in the same instant.
  std::sort(files.begin(), files.end(), [](const fs::path& x, const fs::path& y) {
    const bool cx = x.filename().string().rfind("cancel-", 0) == 0, cy = y.filename().string().rfind("cancel-", 0) == 0;
    return cx != cy ? cy : x < y;
  });
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    if (name.rfind("cancel-", 0) == 0) {
      const std::string id = name.substr(7);
      for (Job& j : jobs_)
        if (j.id == id && !finished(j)) {
          j.cancel_requested = true;
          if (j.state == "queued") {
            j.state = "cancelled";
            j.end_t = now_s();
            log("job " + id + " cancelled while queued");
          } else {
            log("job " + id + ": cancelling (SIGTERM to edprun)");
            signal_job(j, SIGTERM);
          }
          dirty_ = true;
          trigger_ += "cancel " + id + "; ";
        }
      fs::remove(f);
      continue;
    }
    if (f.extension() != ".json") {
      fs::remove(f);
      continue;
    }
    const std::string id = f.stem().string();
    if (std::any_of(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.id == id; })) {
      fs::remove(f);  // taken before a crash of the controller, between save and remove
      continue;
    }
    Job j;
    j.id = id;
    try {
      j.spec = parse_job_spec(read_file(f), f.string());
    } catch (const std::exception& e) {
      log(std::string("refused ") + f.string() + ": " + e.what());
      fs::remove(f);
      continue;
    }
    j.submit_t = now_s();
    if (j.spec.min_workers > o_.slots * (gpu_ ? o_.max_ranks_per_gpu : 1)) {
      j.state = "failed";
      j.error = "min_workers " + std::to_string(j.spec.min_workers) + " exceeds the cluster (" +
                std::to_string(o_.slots) + " slot(s))";
      j.end_t = j.submit_t;
    }
    fs::create_directories(o_.root / "jobs" / id);
    write_atomic(o_.root / "jobs" / id / "spec.json", job_spec_json(j.spec) + "\n");
    jobs_.push_back(j);
    save();
    fs::remove(f);
    log("job " + id + " (" + j.spec.name + ") " + (j.state == "failed" ? "refused: " + j.error : "queued"));
    dirty_ = true;
    trigger_ += "submit " + id + "; ";
  }
}

void Controller::signal_job(Job& j, int sig) {
  // edprun's pid, as its keeper recorded it; edprun forwards the signal to mpirun and cleans up.
  std::ifstream f(dir(j) / "edprun.pid");
  long pid = 0;
  unsigned long long st = 0;
  if (f >> pid >> st && alive(pid, st)) ::kill(static_cast<pid_t>(pid), sig);
}

// What the job's files say since the last look: measured step times, progress, rescales, its end.
void Controller::poll(Job& j) {
  if (j.state != "running") return;
  const fs::path d = dir(j);
  const auto st = changed(d / "status.json", j.status_stamp) ? elastic::read_status((d / "status.json").string())
                                                              : std::nullopt;
  if (st) {
    j.samples_done = st->samples_done;
    j.samples_total = st->samples_total;
    for (const elastic::ConfigMeasure& c : st->configs) {
      const int k = j.ranks_per_slot;
      auto it = std::find_if(j.measured.begin(), j.measured.end(), [&](const Measured& m) {
        return m.workers == c.workers && m.batch == c.global_batch && m.ranks_per_slot == k;
      });
      const bool fresh = it == j.measured.end();
      if (fresh) {
        j.measured.push_back({c.workers, k, c.global_batch, 0, 0, 0});
        it = j.measured.end() - 1;
      }
      // This process's window replaces what an earlier process measured once it has as many steps.
      if (c.steps >= it->steps || fresh) {
        if (it->steps < 3 && c.steps >= 3) {
          dirty_ = true;
          trigger_ += "measured " + j.id + " at " + std::to_string(c.workers) + "x" + std::to_string(c.global_batch) + "; ";
        }
        it->steps = c.steps;
        it->step_s = c.step_s;
        it->comm_s = c.comm_s;
      }
      if (c.workers == j.workers && c.global_batch == j.batch && c.steps >= 3)
        j.samples_per_s = static_cast<double>(c.global_batch) / c.step_s;
    }
  }
  if (changed(d / "events.jsonl", j.events_stamp)) j.events = elastic::read_events((d / "events.jsonl").string());
  const auto& events = j.events;
  for (size_t i = j.events_seen; i < events.size(); ++i) {
    const elastic::MembershipEvent& e = events[i];
    if (e.event == "rescale") {
      ++j.rescales;
      j.pauses.push_back(e.pause_s);
      log("job " + j.id + ": rescaled " + e.mode + " " + std::to_string(e.from_workers) + " -> " +
          std::to_string(e.workers) + " worker(s), global batch " + std::to_string(e.global_batch) + ", pause " +
          std::to_string(e.pause_s) + " s");
    }
    if (e.workers > 0) j.workers = e.workers;
    if (e.global_batch > 0) j.batch = e.global_batch;
    if (j.target_workers > 0 && j.workers == j.target_workers && j.batch == j.target_batch) {
      j.target_workers = 0;
      j.target_batch = 0;
      j.hosts = j.next_hosts;
      j.samples_per_s = 0;
      dirty_ = true;
      trigger_ += "rescaled " + j.id + "; ";
    }
  }
  j.events_seen = events.size();
  // Crash restarts edprun made: starts beyond the controller's own and those of rescales by restart.
  int n_start = 0, n_restart_rescale = 0;
  for (const auto& e : events) {
    n_start += e.event == "start";
    n_restart_rescale += e.event == "rescale" && e.mode == "restart";
  }
  j.restarts = std::max(0, n_start - j.starts - n_restart_rescale);
  if (j.target_workers > 0 && now_s() - j.target_t > o_.rescale_timeout_s) {
    log("job " + j.id + ": the rescale to " + std::to_string(j.target_workers) + " worker(s) did not happen within " +
        std::to_string(o_.rescale_timeout_s) + " s (see its log); it stays at " + std::to_string(j.workers));
    j.target_workers = 0;
    j.target_batch = 0;
    if (!o_.hosts.empty()) {
      j.next_hosts = j.hosts;  // it runs where it ran; a later restart too
      write_hostfile(j, j.hosts);
    }
    write_atomic(d / "control.json", json{{"workers", j.workers}, {"global_batch", j.batch}}.dump() + "\n");
  }
  if (j.preempt_requested && !j.preempt_signalled && now_s() - j.preempt_t > o_.preempt_grace_s) {
    log("job " + j.id + ": did not stop within " + std::to_string(static_cast<int>(o_.preempt_grace_s)) +
        " s of the stop request; SIGTERM to edprun (it loses the steps since its last checkpoint)");
    signal_job(j, SIGTERM);
    j.preempt_signalled = true;
    save();
  }
  // Its end: the keeper wrote exit.json, or the keeper is gone without one.
  const fs::path ex = d / "exit.json";
  if (fs::exists(ex)) {
    const json e = json::parse(read_file(ex), nullptr, false);
    finish(j, e.is_discarded() ? json{{"code", -1}} : e);
  } else if (!alive(j.keeper_pid, j.keeper_start)) {
    finish(j, json{{"code", -1}, {"lost", true}});
  }
}

// The job's own last complaint in its log: the last line outside Open MPI's banners (between
// dashed lines) that reads like an error, else edprun's, else the last line.
std::string last_error(const fs::path& log) {
  std::ifstream f(log);
  std::string line, last, err, launcher_err;
  bool banner = false;
  while (std::getline(f, line)) {
    if (line.rfind("-----", 0) == 0) {
      banner = !banner;
      continue;
    }
    if (banner || line.empty()) continue;
    std::string low = line;
    std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return std::tolower(c); });
    bool complaint = false;
    for (const char* w : {"error", "unknown", "cannot", "invalid", "what()", "fail", "abort", "refus"})
      complaint = complaint || low.find(w) != std::string::npos;
    const bool launcher = line.rfind("edprun", 0) == 0;
    if (!launcher) last = line;
    if (complaint) (launcher ? launcher_err : err) = line;
  }
  const std::string s = !err.empty() ? err : !launcher_err.empty() ? launcher_err : last;
  return s.size() > 400 ? s.substr(0, 400) + "..." : s;
}

void Controller::finish(Job& j, const json& ex) {
  // Last measurements and events before deciding what happened.
  const int code = ex.value("code", -1);
  const fs::path d = dir(j);
  j.exit_code = code;
  j.gpus.clear();
  j.hosts.clear();
  j.next_hosts.clear();
  j.target_workers = 0;
  j.target_batch = 0;
  dirty_ = true;
  const bool signalled = j.preempt_signalled;
  j.preempt_signalled = false;
  // A preempted job that ended for another reason (it finished, or failed, before it saw the
  // stop) ends as that.
  if (j.preempt_requested && !j.cancel_requested && (code == elastic::kStopExitCode || (signalled && code != 0))) {
    j.preempt_requested = false;
    j.state = "queued";
    j.samples_per_s = 0;
    ++j.preemptions;
    log("job " + j.id + " preempted: " +
        (code == elastic::kStopExitCode ? "it committed a checkpoint and stopped; queued again (it resumes there)"
                                        : "stopped by SIGTERM; queued again (it resumes from its last checkpoint)"));
    trigger_ += "preempted " + j.id + "; ";
    return;
  }
  j.preempt_requested = false;
  j.end_t = now_s();
  if (j.cancel_requested) {
    j.state = "cancelled";
  } else if (code == 0) {
    j.state = "done";
    const auto st = elastic::read_status((d / "status.json").string());
    if (st) j.samples_done = st->samples_done;
  } else {
    j.state = "failed";
    j.error = ex.value("lost", false) ? "its keeper process disappeared without recording an exit status"
                                      : "exit code " + std::to_string(code) + ": " + last_error(d / "log");
  }
  log("job " + j.id + " " + j.state + (j.state == "failed" ? " (" + j.error + ")" : "") +
      " after " + std::to_string(static_cast<int>(j.end_t - j.start_t)) + " s, " + std::to_string(j.rescales) +
      " rescale(s)");
  trigger_ += j.state + " " + j.id + "; ";
}

void Controller::start(Job& j, int workers, int k, int64_t batch) {
  const fs::path d = dir(j);
  fs::create_directories(d);
  fs::remove(d / "exit.json");
  fs::remove(d / "edprun.pid");
  // The size it starts at, for the ranks to refuse nothing: the control file names it.
  write_atomic(d / "control.json", json{{"workers", workers}, {"global_batch", batch}}.dump() + "\n");
  std::vector<std::string> argv = {o_.edprun, "--np", std::to_string(workers), "--control-file",
                                   (d / "control.json").string(), "--status-file", (d / "status.json").string(),
                                   "--events-file", (d / "events.jsonl").string(), "--max-restarts",
                                   std::to_string(j.spec.max_restarts), "--restart-backoff", "1"};
  if (gpu_) {
    std::string list;
    for (int g : j.gpus) list += (list.empty() ? "" : ",") + std::to_string(g);
    argv.insert(argv.end(), {"--gpus", list, "--ranks-per-gpu", std::to_string(k)});
  } else if (!o_.hosts.empty()) {
    // Several hosts: the job's own hostfile, which the controller rewrites before each rescale and
    // edprun reads again at each restart; sizes up to the whole cluster may be asked for.
    j.hosts = j.next_hosts = assign_hosts(j, workers);
    write_hostfile(j, j.hosts);
    argv.insert(argv.end(), {"--gpus", "none", "--hostfile", (d / "hostfile").string(), "--reread-hostfile",
                             "--max-np", std::to_string(o_.slots), "--bind-to", "none", "--threads-per-rank", "1"});
  } else {
    // A slot is a core: one thread per rank, ranks unbound (other jobs share the host), and
    // edprun plans up to the whole cluster so that the job may be grown to any size.
    argv.insert(argv.end(), {"--gpus", "none", "--cores-per-host", std::to_string(o_.slots), "--bind-to", "none",
                             "--threads-per-rank", "1"});
  }
  argv.insert(argv.end(), o_.edprun_args.begin(), o_.edprun_args.end());
  argv.push_back("--");
  for (std::string a : j.spec.command) {
    for (size_t p; (p = a.find("{job_dir}")) != std::string::npos;) a.replace(p, 9, d.string());
    argv.push_back(a);
  }
  // The program's flags give its first global batch; the control file names the one chosen, which
  // the job adopts at its first look at the file (in place).
  std::vector<std::pair<std::string, std::string>> env(j.spec.env.begin(), j.spec.env.end());
  const std::string cwd = j.spec.cwd.empty() ? o_.root.string() : j.spec.cwd;
  const std::string logp = (d / "log").string();
  const std::string exitp = (d / "exit.json").string(), pidp = (d / "edprun.pid").string();

  const pid_t keeper = fork();
  if (keeper < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (keeper == 0) {
    // The keeper: its own session (a signal to the controller's terminal or process group does not
    // reach the job), no descriptor of the controller's (the serve lock).
    setsid();
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    const int logfd = ::open(logp.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int nul = ::open("/dev/null", O_RDONLY);
    dup2(nul, 0);
    dup2(logfd, 1);
    dup2(logfd, 2);
    for (int fd = 3; fd < 1024; ++fd) ::close(fd);
    const pid_t child = fork();
    if (child == 0) {
      signal(SIGTERM, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      if (chdir(cwd.c_str()) != 0) {
        std::fprintf(stderr, "edp-autoscale: cannot enter %s: %s\n", cwd.c_str(), std::strerror(errno));
        _exit(127);
      }
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execvp(cargv[0], cargv.data());
      std::fprintf(stderr, "edp-autoscale: cannot run %s: %s\n", cargv[0], std::strerror(errno));
      _exit(127);
    }
    if (child > 0) {
      std::ofstream(pidp + ".tmp") << child << " " << launch::process_start_time(child) << "\n";
      std::rename((pidp + ".tmp").c_str(), pidp.c_str());
    }
    int status = 0;
    while (child > 0 && waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    const int code = child < 0 ? 127 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ofstream(exitp + ".tmp") << json{{"code", code}, {"t", now_s()}}.dump() << "\n";
    std::rename((exitp + ".tmp").c_str(), exitp.c_str());
    _exit(0);
  }
  j.keeper_pid = keeper;
  // The child's start time: read until /proc shows it (it exists from fork on).
  for (int i = 0; i < 100 && (j.keeper_start = launch::process_start_time(keeper)) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  write_atomic(d / "keeper.json", json{{"pid", keeper}, {"start_time", j.keeper_start}}.dump() + "\n");
  j.state = "running";
  j.workers = workers;
  j.ranks_per_slot = k;
  j.batch = batch;
  j.target_workers = 0;
  j.target_batch = 0;
  j.samples_per_s = 0;
  j.events_seen = elastic::read_events((d / "events.jsonl").string()).size();
  if (j.start_t == 0) j.start_t = now_s();
  ++j.starts;
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  log("job " + j.id + " started: " + cmd);
}

void Controller::request(Job& j, int workers, int64_t batch) {
  if (!o_.hosts.empty() && workers != j.workers) {
    j.next_hosts = assign_hosts(j, workers);  // throws (nothing asked) when it does not fit
    write_hostfile(j, j.next_hosts);
  }
  j.target_workers = workers;
  j.target_batch = batch;
  j.target_t = now_s();
  write_atomic(dir(j) / "control.json", json{{"workers", workers}, {"global_batch", batch}}.dump() + "\n");
}

// Asks the job to commit a checkpoint and stop (exit 78) at its next look at the control file;
// poll() sends SIGTERM if it has not stopped within --preempt-grace.
void Controller::preempt(Job& j, const std::string& reason) {
  j.preempt_requested = true;
  j.preempt_t = now_s();
  j.preempt_signalled = false;
  j.target_workers = 0;
  j.target_batch = 0;
  write_atomic(dir(j) / "control.json", json{{"workers", j.workers}, {"global_batch", j.batch}, {"stop", true}}.dump() + "\n");
  log("job " + j.id + ": preempted (asked to checkpoint and stop): " + reason);
}

void Controller::replan(const std::string& trigger) {
  const double t0 = now_s();
  std::vector<LiveJob> live;
  std::vector<Job*> refs;
  for (Job& j : jobs_) {
    if (j.state != "queued" && j.state != "running") continue;
    if (j.cancel_requested || j.preempt_requested) continue;
    LiveJob l;
    l.id = j.id;
    l.spec = j.spec;
    l.running = j.state == "running";
    l.workers = j.workers;
    l.ranks_per_slot = j.ranks_per_slot;
    l.batch = j.batch;
    const bool measured_here = j.samples_per_s > 0;
    // GPU jobs keep their GPUs while they run (rescale across GPUs: not yet, docs/autoscaler.md §8).
    l.settled = l.running && measured_here && j.target_workers == 0 && !gpu_;
    l.measured = j.measured;
    l.samples_done = j.samples_done;
    l.samples_total = j.samples_total;
    if (!j.pauses.empty()) {
      double s = 0;
      for (double p : j.pauses) s += p;
      l.pause_s = s / static_cast<double>(j.pauses.size());
    }
    live.push_back(std::move(l));
    refs.push_back(&j);
  }
  LivePolicy p;
  p.name = o_.policy;
  p.slots = o_.slots;
  p.gpu_slots = gpu_;
  p.max_ranks_per_slot = gpu_ ? o_.max_ranks_per_gpu : 1;
  p.hysteresis = o_.hysteresis;
  p.default_pause_s = o_.pause_s >= 0 ? o_.pause_s : gpu_ ? 30.0 : kMeasuredCpuRescalePauseS;
  p.start_s = o_.start_s;
  LivePlan plan;
  try {
    plan = plan_live(live, p);
  } catch (const std::exception& e) {
    log(std::string("planning failed, nothing changed: ") + e.what());
    return;
  }
  json decisions = json::array();
  // Shrinks and stops first; then grows and starts while the slots they need are free (the
  // others wait for the next round, when the shrinks have landed).
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < live.size(); ++i) {
      Job& j = *refs[i];
      const LiveChoice& c = plan.choices[i];
      const bool frees = c.action == "shrink" || c.action == "stop" || c.action == "rebatch";
      if ((pass == 0) != frees) continue;
      json d = {{"job", j.id}, {"action", c.action}, {"reason", c.reason}, {"workers", c.workers},
                {"ranks_per_slot", c.ranks_per_slot}, {"batch", c.batch}, {"samples_per_s", c.samples_per_s},
                {"measured", c.measured}, {"remaining_s", c.remaining_s}};
      if (c.action == "grow" || c.action == "start") {
        const int need = c.slots - (j.state == "running" ? (j.workers + j.ranks_per_slot - 1) / j.ranks_per_slot : 0);
        if (slots_held() + need > o_.slots) {
          d["action"] = "deferred";
          d["reason"] = c.action + " deferred until " + std::to_string(need) + " slot(s) are free: " + c.reason;
          decisions.push_back(d);
          continue;
        }
      }
      if (c.action == "start") {
        if (gpu_) {
          std::vector<bool> used(static_cast<size_t>(o_.slots), false);
          for (const Job& o : jobs_)
            for (int g : o.gpus) used[static_cast<size_t>(g)] = true;
          j.gpus.clear();
          for (int g = 0; g < o_.slots && static_cast<int>(j.gpus.size()) < c.slots; ++g)
            if (!used[static_cast<size_t>(g)]) j.gpus.push_back(g);
        }
        try {
          start(j, c.workers, c.ranks_per_slot, c.batch);
        } catch (const std::exception& e) {
          j.state = "failed";
          j.error = std::string("could not be started: ") + e.what();
          j.end_t = now_s();
        }
      } else if (c.action == "grow" || c.action == "shrink" || c.action == "rebatch") {
        try {
          request(j, c.workers, c.batch);
          log("job " + j.id + ": " + c.action + ": " + c.reason);
        } catch (const std::exception& e) {
          d["action"] = "deferred";
          d["reason"] = c.action + " deferred: " + e.what();
        }
      } else if (c.action == "stop") {
        preempt(j, c.reason);
      }
      decisions.push_back(d);
    }
  json line = {{"t", t0},
                     {"trigger", trigger},
                     {"policy", o_.policy},
                     {"slots", o_.slots},
                     {"slots_used", plan.slots_used},
                     {"objective", plan.objective},
                     {"solve_ms", plan.solve_ms},
                     {"decide_ms", (now_s() - t0) * 1e3},
                     {"jobs", decisions}};
  if (!o_.hosts.empty()) line["hosts"] = hosts_json();
  std::ofstream(o_.root / "decisions.jsonl", std::ios::app) << line.dump() << "\n";
  last_plan_ = now_s();
  save();
}

int Controller::run() {
  fs::create_directories(o_.root / "inbox");
  fs::create_directories(o_.root / "jobs");
  const int lock = lock_file(o_.root / "serve.lock", false);
  if (lock < 0) throw Error("another edp-autoscale serve runs on " + o_.root.string() + " (" + (o_.root / "serve.lock").string() + " is locked)");
  if (o_.kind == "auto") {
    o_.kind = std::system("nvidia-smi -L >/dev/null 2>&1") == 0 ? "gpu" : "cpu";
  }
  gpu_ = o_.kind == "gpu";
  jobs_ = load_table(o_.root);
  int adopted = 0;
  for (Job& j : jobs_)
    if (j.state == "running") {
      ++adopted;
      poll(j);  // ended while no controller ran? exit.json or a dead keeper tells
    }
  check_adopted_hosts();  // before serve.json: a refused start leaves the last one's settings
  write_atomic(o_.root / "serve.json", json{{"pid", getpid()}, {"slots", o_.slots}, {"kind", o_.kind},
                                            {"policy", o_.policy}, {"max_ranks_per_gpu", o_.max_ranks_per_gpu},
                                            {"hostfile", o_.hostfile},
                                            {"started_t", now_s()}}.dump() + "\n");
  if (adopted) log("re-adopted " + std::to_string(adopted) + " job(s) from " + (o_.root / "jobs.json").string());
  log(std::to_string(o_.slots) + " " + o_.kind + " slot(s)" +
      (o_.hosts.empty() ? std::string() : " on " + std::to_string(o_.hosts.size()) + " host(s) of " + o_.hostfile) +
      ", policy " + o_.policy + ", root " + o_.root.string());
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  dirty_ = true;
  trigger_ = adopted ? "controller restarted; " : "controller started; ";
  while (!g_stop) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }  // keepers that ended (their exit.json says how the job did)
    take_inbox();
    for (Job& j : jobs_) poll(j);
    if (dirty_ || now_s() - last_plan_ >= o_.replan_s) {
      replan(dirty_ ? trigger_ : "periodic");
      dirty_ = false;
      trigger_.clear();
    }
    if (o_.exit_when_idle && !jobs_.empty() && std::all_of(jobs_.begin(), jobs_.end(), finished)) {
      bool inbox_empty = fs::is_empty(o_.root / "inbox");
      if (inbox_empty) break;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.tick_s));
  }
  save();
  const int running = static_cast<int>(std::count_if(jobs_.begin(), jobs_.end(), [](const Job& j) { return j.state == "running"; }));
  if (running) log("stopping; " + std::to_string(running) + " job(s) keep running and are re-adopted by the next serve on this root");
  ::close(lock);
  return 0;
}

// ---- submit / status / cancel ---------------------------------------------------------------------

int submit(const fs::path& root, const std::string& spec_path) {
  std::string text;
  if (spec_path == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    if (!fs::exists(spec_path)) throw DataError(spec_path + ": no such file");
    text = read_file(spec_path);
  }
  JobSpec s = parse_job_spec(text, spec_path);
  if (s.cwd.empty()) s.cwd = fs::current_path().string();
  if (fs::exists(root / "serve.json")) {
    const json c = json::parse(read_file(root / "serve.json"), nullptr, false);
    if (!c.is_discarded()) {
      const int cap = c.value("slots", 0) * (c.value("kind", "") == "gpu" ? std::max(1, c.value("max_ranks_per_gpu", 1)) : 1);
      if (cap > 0 && s.min_workers > cap)
        throw DataError(spec_path + ": field 'min_workers': " + std::to_string(s.min_workers) +
                        " worker(s) can never run on this cluster (" + std::to_string(c.value("slots", 0)) + " slot(s))");
    }
  }
  fs::create_directories(root / "inbox");
  const int lock = lock_file(root / "submit.lock", true);
  long n = 0;
  {
    std::ifstream f(root / "next_id");
    f >> n;
  }
  ++n;
  char id[32];
  std::snprintf(id, sizeof id, "j%04ld", n);
  try {
    write_atomic(root / "next_id", std::to_string(n) + "\n");
    // Written under a dot name, then renamed: serve never sees half a spec.
    const fs::path tmp = root / "inbox" / (std::string(".") + id + ".json");
    write_atomic(tmp, job_spec_json(s) + "\n");
    fs::rename(tmp, root / "inbox" / (std::string(id) + ".json"));
  } catch (...) {
    ::close(lock);
    throw;
  }
  ::close(lock);
  std::printf("%s\n", id);
  return 0;
}

int cancel(const fs::path& root, const std::string& id) {
  bool known = fs::exists(root / "inbox" / (id + ".json"));
  for (const Job& j : load_table(root))
    if (j.id == id) {
      if (finished(j)) throw DataError("job " + id + " has already ended (" + j.state + ")");
      known = true;
    }
  if (!known) throw DataError("no job " + id + " under " + root.string());
  write_atomic(root / "inbox" / ("cancel-" + id), "\n");
  std::printf("cancel requested for %s\n", id.c_str());
  return 0;
}

int status(const fs::path& root, bool as_json) {
  std::vector<Job> jobs = load_table(root);
  if (fs::exists(root / "inbox"))
    for (const auto& e : fs::directory_iterator(root / "inbox"))
      if (e.path().extension() == ".json" && e.path().filename().string()[0] != '.') {
        Job j;
        j.id = e.path().stem().string();
        try {
          j.spec = parse_job_spec(read_file(e.path()), e.path().string());
        } catch (...) {
          continue;
        }
        j.state = "submitted";
        jobs.push_back(j);
      }
  bool serving = false;
  if (fs::exists(root / "serve.lock")) {
    const int fd = lock_file(root / "serve.lock", false);
    serving = fd < 0;
    if (fd >= 0) ::close(fd);
  }
  if (as_json) {
    json arr = json::array();
    for (const Job& j : jobs) {
      json x = job_json(j);
      const StepTimeModel m = fit_measured(j.measured);
      x["fit"] = {{"a", m.a}, {"c", m.c}, {"s0", m.s0}, {"s1", m.s1},
                  {"points", j.measured.size()}};
      x["progress"] = j.samples_total > 0 ? static_cast<double>(j.samples_done) / static_cast<double>(j.samples_total) : 0.0;
      arr.push_back(x);
    }
    std::printf("%s\n", json{{"root", root.string()}, {"serving", serving}, {"jobs", arr}}.dump(2).c_str());
    return 0;
  }
  std::printf("%s: controller %s\n", root.string().c_str(), serving ? "running" : "not running");
  std::printf("%-6s %-16s %-10s %7s %5s %7s %10s %8s %8s %8s %8s  %s\n", "job", "name", "state", "workers", "k",
              "batch", "samples/s", "progress", "restarts", "rescales", "preempts", "note");
  for (const Job& j : jobs) {
    const bool run = j.state == "running";
    char prog[16] = "-";
    if (j.samples_total > 0) std::snprintf(prog, sizeof prog, "%.0f%%", 100.0 * j.samples_done / j.samples_total);
    char sps[24] = "-";
    if (run && j.samples_per_s > 0) std::snprintf(sps, sizeof sps, "%.0f", j.samples_per_s);
    std::string note = j.error;
    if (run && j.target_workers > 0) note = "rescaling to " + std::to_string(j.target_workers) + "x" + std::to_string(j.target_batch);
    if (run && j.preempt_requested) note = "stopping (preempted)";
    std::printf("%-6s %-16s %-10s %7s %5s %7s %10s %8s %8d %8d %8d  %s\n", j.id.c_str(), j.spec.name.substr(0, 16).c_str(),
                j.state.c_str(), run ? std::to_string(j.workers).c_str() : "-",
                run ? std::to_string(j.ranks_per_slot).c_str() : "-", run ? std::to_string(j.batch).c_str() : "-", sps,
                prog, j.restarts, j.rescales, j.preemptions, note.c_str());
  }
  return 0;
}

std::string default_edprun() {
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& p : {exe.parent_path() / "edprun", exe.parent_path().parent_path() / "edprun" / "edprun"})
      if (fs::exists(p)) return p.string();
  }
  return "edprun";
}

}  // namespace

// The live subcommands; main.cpp hands argv over when argv[1] names one of them.
int live_main(int argc, char** argv) {
  const std::string cmd = argv[1];
  CLI::App app{"edp-autoscale " + cmd + ": the live autoscaler (docs/autoscaler.md, section 8)", "edp-autoscale " + cmd};
  ServeOptions o;
  std::string root, spec, id;
  bool as_json = false;
  std::string edprun_args;
  app.add_option("--root", root, "the controller's directory (jobs, table, decision log)")->required()->envname("EDP_AUTOSCALE_ROOT");
  if (cmd == "serve") {
    app.add_option("--slots", o.slots, "slots of the cluster: GPUs, or CPU workers (cores) on a machine without GPUs "
                   "(with --hostfile: the sum of its slots)")
        ->check(CLI::Range(1, 4096))->envname("EDP_AUTOSCALE_SLOTS");
    app.add_option("--hostfile", o.hostfile, "CPU jobs on several hosts: an Open MPI hostfile (host slots=N); each job "
                   "gets a hostfile of its own slots, rewritten before its rescales")
        ->envname("EDP_AUTOSCALE_HOSTFILE");
    app.add_option("--slot-kind", o.kind, "auto (gpu when nvidia-smi lists GPUs), cpu or gpu")
        ->check(CLI::IsMember({"auto", "cpu", "gpu"}))->envname("EDP_AUTOSCALE_SLOT_KIND")->capture_default_str();
    app.add_option("--policy", o.policy, "goodput (restart-aware; efficiency from the spec's grad_noise_scale), dp, static")
        ->check(CLI::IsMember({"goodput", "dp", "static"}))->envname("EDP_AUTOSCALE_POLICY")->capture_default_str();
    app.add_option("--replan", o.replan_s, "seconds between periodic plans (besides submit, end, measurement)")
        ->check(CLI::Range(0.1, 86400.0))->envname("EDP_AUTOSCALE_REPLAN")->capture_default_str();
    app.add_option("--hysteresis", o.hysteresis, "value fraction a change must beat staying by")
        ->check(CLI::Range(0.0, 0.99))->envname("EDP_AUTOSCALE_HYSTERESIS")->capture_default_str();
    app.add_option("--pause", o.pause_s, "rescale cost (s) assumed before a job measured its own (default: the measured CPU in-place pause, 30 s on GPUs)")
        ->check(CLI::Range(0.0, 3600.0))->envname("EDP_AUTOSCALE_PAUSE");
    app.add_option("--start-cost", o.start_s, "seconds a job start is assumed to cost")->check(CLI::Range(0.0, 3600.0))
        ->envname("EDP_AUTOSCALE_START_COST")->capture_default_str();
    app.add_option("--rescale-timeout", o.rescale_timeout_s, "seconds after which a rescale that did not land is given up")
        ->check(CLI::Range(1.0, 86400.0))->capture_default_str();
    app.add_option("--preempt-grace", o.preempt_grace_s, "seconds a preempted job has to checkpoint and stop before "
                   "it gets SIGTERM")->check(CLI::Range(0.0, 86400.0))->envname("EDP_AUTOSCALE_PREEMPT_GRACE")->capture_default_str();
    app.add_option("--max-ranks-per-gpu", o.max_ranks_per_gpu, "GPU slots: the most ranks one job may run per GPU (MPS)")
        ->check(CLI::Range(1, 8))->envname("EDP_AUTOSCALE_MAX_RANKS_PER_GPU")->capture_default_str();
    app.add_option("--tick", o.tick_s, "seconds between looks at the jobs")->check(CLI::Range(0.01, 10.0))->capture_default_str();
    app.add_option("--edprun", o.edprun, "the edprun to start jobs with (default: beside this program, else PATH)")
        ->envname("EDP_AUTOSCALE_EDPRUN");
    app.add_option("--edprun-args", edprun_args, "extra edprun arguments, space-separated (e.g. --allow-run-as-root)")
        ->envname("EDP_AUTOSCALE_EDPRUN_ARGS");
    app.add_flag("--exit-when-idle", o.exit_when_idle, "stop once a job was submitted and every job has ended, nothing queued");
    app.add_flag("--quiet", o.quiet, "no log on stderr (the decision log is still written)");
  } else if (cmd == "submit") {
    app.add_option("spec", spec, "the job spec (JSON; '-' for stdin)")->required();
  } else if (cmd == "status") {
    app.add_flag("--json", as_json, "the table as JSON, with each job's measurements and throughput fit");
  } else if (cmd == "cancel") {
    app.add_option("id", id, "the job to cancel")->required();
  }
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (cmd == "serve") {
      o.root = fs::absolute(root);
      if (!o.hostfile.empty()) {
        o.hostfile = fs::absolute(o.hostfile).string();
        if (o.kind == "gpu") throw DataError("--hostfile: jobs on several hosts run on CPU slots for now (--slot-kind cpu)");
        o.kind = "cpu";
        o.hosts = launch::read_hostfile(o.hostfile);
        int sum = 0;
        for (const auto& h : o.hosts) {
          if (h.slots < 1) throw DataError(o.hostfile + ": host " + h.name + " has no slots=N (the controller hands out slots)");
          sum += h.slots;
        }
        if (o.slots > 0 && o.slots != sum)
          throw DataError("--slots " + std::to_string(o.slots) + " contradicts the hostfile's " + std::to_string(sum) +
                          " slot(s); leave --slots out");
        o.slots = sum;
      } else if (o.slots < 1) {
        throw DataError("--slots N (or --hostfile FILE) is needed");
      }
      if (o.edprun.empty()) o.edprun = default_edprun();
      std::stringstream ss(edprun_args);
      for (std::string a; ss >> a;) o.edprun_args.push_back(a);
      return Controller(o).run();
    }
    if (cmd == "submit") return submit(fs::absolute(root), spec);
    if (cmd == "status") return status(fs::absolute(root), as_json);
    return cancel(fs::absolute(root), id);
  } catch (const DataError& e) {
    std::fprintf(stderr, "edp-autoscale %s: invalid input: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edp-autoscale %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
